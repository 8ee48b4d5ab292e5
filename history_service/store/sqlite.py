"""The SQLite backend of the accepted-message store (the shared state database).

One connection (WAL, synchronous=FULL, via scrollback.state.sqlite.connect)
behind a lock; callers run these methods in a worker thread. Each write is one
`BEGIN IMMEDIATE` transaction, committed before the method returns.
Pending records age out (the newest `keep` per session, accepted within
`ttl_seconds`): they get `retired_at` and lose their `blob_ref` rows.

Each message records who accepted it (`accepted_by`, the anonymous principal
without auth) and each binding whose chat key it is (`principal`): a chat key
lives in its principal's namespace, so messages found by chat key and
bindings are that principal's alone. `client_txn_id` is in the same
namespace (UNIQUE per principal): another principal's use of an id is
neither a replay nor a conflict, and tells the caller nothing.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence, Set
from pathlib import Path
from typing import TypeVar

from history_service.accept import AcceptedRecord, AcceptRequest
from history_service.errors import BlobMissingError, ChatKeyBoundError
from history_service.store.records import (
    COLUMNS,
    MAX_PUBLIC_SEQ,
    PENDING_GROUP,
    REPLAY_COLUMNS,
    attached_digests,
    attachments_json,
    new_record,
    next_public_seq,
    record_of,
    replay_of,
)
from scrollback.state.sqlite import (
    blob_owned_by,
    blob_referencing,
    connect,
    write_transaction,
)

T = TypeVar("T")


class SqliteAcceptedMessageStore:
    """AcceptedMessageStore on the shared SQLite state database."""

    def __init__(
        self,
        state_dir: Path,
        *,
        keep: int = 50,
        ttl_seconds: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._connection = connect(state_dir)
        self._lock = threading.Lock()
        self._keep = keep
        self._ttl = ttl_seconds
        self._clock = clock

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return write_transaction(self._connection, work)

    def accept(
        self, principal: str, request: AcceptRequest, readable: Set[str]
    ) -> tuple[AcceptedRecord, bool]:
        """Record a message durably; replay on the same txn id and content."""
        digest = request.digest

        def work(connection: sqlite3.Connection) -> tuple[AcceptedRecord, bool]:
            row = connection.execute(
                f"SELECT {REPLAY_COLUMNS} FROM accepted_message"
                " WHERE accepted_by = ? AND client_txn_id = ?",
                (principal, request.client_txn_id),
            ).fetchone()
            if row is not None:
                return replay_of(row, digest, principal)
            wanted = attached_digests(request, readable)
            if wanted:
                marks = ",".join("?" * len(wanted))
                found = connection.execute(
                    f"SELECT COUNT(*) FROM blob WHERE sha256 IN ({marks})", wanted
                ).fetchone()[0]
                if found != len(wanted):
                    raise BlobMissingError()
            session_id = request.session_id
            if not session_id:
                bound = connection.execute(
                    "SELECT session_id FROM chat_binding WHERE principal = ? AND chat_key = ?",
                    (principal, request.chat_key),
                ).fetchone()
                session_id = bound[0] if bound else ""
            now = self._clock()
            public_seq = next_public_seq(now, connection.execute(MAX_PUBLIC_SEQ).fetchone()[0])
            cursor = connection.execute(
                "INSERT INTO accepted_message (client_txn_id, session_id, chat_key, text,"
                " attachments, content_digest, accepted_at, accepted_by, public_seq)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request.client_txn_id,
                    session_id or None,
                    request.chat_key or None,
                    request.text,
                    attachments_json(request),
                    digest,
                    now,
                    principal,
                    public_seq,
                ),
            )
            seq = int(cursor.lastrowid or 0)
            connection.executemany(
                "INSERT OR IGNORE INTO blob_ref (sha256, message_seq) VALUES (?, ?)",
                [(sha, seq) for sha in wanted],
            )
            self._retire(connection, now)
            return new_record(seq, request, session_id, now, public_seq), False

        return self._write(work)

    def _retire(self, connection: sqlite3.Connection, now: float) -> None:
        connection.execute(
            "UPDATE accepted_message SET retired_at = ? WHERE retired_at IS NULL AND ("
            " accepted_at < ? OR seq NOT IN (SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER ("
            f"  PARTITION BY {PENDING_GROUP} ORDER BY seq DESC) AS rank"
            "  FROM accepted_message WHERE retired_at IS NULL) WHERE rank <= ?))",
            (now, now - self._ttl, self._keep),
        )
        connection.execute(
            "DELETE FROM blob_ref WHERE message_seq IN"
            " (SELECT seq FROM accepted_message WHERE retired_at IS NOT NULL)"
        )

    def bind(self, principal: str, chat_key: str, session_id: str) -> int:
        """Bind `principal`'s chat key to a session; ChatKeyBoundError if it is bound elsewhere."""

        def work(connection: sqlite3.Connection) -> int:
            row = connection.execute(
                "SELECT session_id FROM chat_binding WHERE principal = ? AND chat_key = ?",
                (principal, chat_key),
            ).fetchone()
            if row is not None and row[0] != session_id:
                raise ChatKeyBoundError()
            if row is None:
                connection.execute(
                    "INSERT INTO chat_binding (principal, chat_key, session_id, bound_at)"
                    " VALUES (?, ?, ?, ?)",
                    (principal, chat_key, session_id, self._clock()),
                )
            cursor = connection.execute(
                "UPDATE accepted_message SET session_id = ? WHERE chat_key = ? AND session_id IS NULL"
                " AND accepted_by = ?",
                (session_id, chat_key, principal),
            )
            return int(cursor.rowcount)

        return self._write(work)

    def binding(self, principal: str, chat_key: str) -> str | None:
        """The session `principal`'s chat key is bound to, if any."""
        with self._lock:
            row = self._connection.execute(
                "SELECT session_id FROM chat_binding WHERE principal = ? AND chat_key = ?",
                (principal, chat_key),
            ).fetchone()
        return str(row[0]) if row else None

    def pending(
        self, principal: str, session_id: str, chat_key: str
    ) -> tuple[list[AcceptedRecord], int]:
        """Unretired messages (retiring the aged ones first) and the last seq, in one transaction."""

        def work(connection: sqlite3.Connection) -> tuple[list[AcceptedRecord], int]:
            self._retire(connection, self._clock())
            values: list[str]
            if session_id:
                where, values = "session_id = ?", [session_id]
            else:
                where = "chat_key = ? AND session_id IS NULL AND accepted_by = ?"
                values = [chat_key, principal]
            rows = connection.execute(
                f"SELECT {COLUMNS} FROM accepted_message WHERE retired_at IS NULL AND {where}"
                " ORDER BY seq",
                values,
            ).fetchall()
            last = connection.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM accepted_message"
            ).fetchone()
            return [record_of(r) for r in rows], int(last[0])

        return self._write(work)

    def since(
        self, principal: str, session_id: str, chat_key: str, after_seq: int
    ) -> list[AcceptedRecord]:
        """Messages of a session or of `principal`'s chat key with seq > after_seq, oldest first."""
        with self._lock:
            rows = self._connection.execute(
                f"SELECT {COLUMNS} FROM accepted_message WHERE seq > ? AND"
                " (session_id = ? OR (chat_key = ? AND accepted_by = ?))"
                " ORDER BY seq LIMIT 1000",
                (after_seq, session_id or None, chat_key or None, principal),
            ).fetchall()
        return [record_of(r) for r in rows]

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (the shared read-rule query)."""
        with self._lock:
            return blob_owned_by(self._connection, digests, principal)

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
        with self._lock:
            return blob_referencing(self._connection, sha256)

    def last_seq(self) -> int:
        """The highest seq assigned so far."""
        with self._lock:
            row = self._connection.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM accepted_message"
            ).fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()
