"""The accepted-message store's SQL, written once for both backends.

`SqlAcceptedMessageStore` holds every statement with `?` marks; a backend
(history_service.store.sqlite, history_service.store.postgres) supplies the
parameter mark, how a read and a write transaction run, how writers
serialize, and how a message's text is stored. Pending records age out (the
newest `keep` per session, accepted within `ttl_seconds`): they get
`retired_at` and lose their `blob_ref` rows.

Each message records who accepted it (`accepted_by`, the anonymous principal
without auth) and each binding whose chat key it is (`principal`): a chat key
lives in its principal's namespace, so messages found by chat key and
bindings are that principal's alone. `client_txn_id` is in the same
namespace (UNIQUE per principal): another principal's use of an id is
neither a replay nor a conflict, and tells the caller nothing. The insert is
`ON CONFLICT DO NOTHING`, so of two writers racing on one id (replicas on
PostgreSQL) the loser re-reads the winner's row and replays it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence, Set
from typing import Any, TypeVar

from history_service.accept import AcceptedRecord, AcceptRequest
from history_service.errors import BlobMissingError, ChatKeyBoundError, TxnConflictError
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

T = TypeVar("T")

_BINDING = "SELECT session_id FROM chat_binding WHERE principal = ? AND chat_key = ?"
_FOLLOWED = "SELECT 1 FROM chat_binding WHERE session_id = ? LIMIT 1"
_LAST_SEQ = "SELECT COALESCE(MAX(seq), 0) FROM accepted_message"


class SqlAcceptedMessageStore:
    """AcceptedMessageStore over SQL; subclasses bind it to one database."""

    _mark = "?"
    # What a write takes on the attachments' blob rows so a concurrent collection waits.
    _blob_row_lock = ""

    def __init__(
        self,
        *,
        keep: int = 50,
        ttl_seconds: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keep = keep
        self._ttl = ttl_seconds
        self._clock = clock

    # The backend's part ------------------------------------------------------------

    def _read(self, work: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _write(self, work: Callable[[Any], T]) -> T:
        """Run `work` in one write transaction, writers of the store serialized."""
        raise NotImplementedError

    def _stored_text(self, text: str) -> str | bytes:
        return text

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        raise NotImplementedError

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # The SQL -------------------------------------------------------------------------

    def _run(self, connection: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return connection.execute(sql.replace("?", self._mark), params)

    def _existing(
        self, connection: Any, request: AcceptRequest, principal: str
    ) -> tuple[AcceptedRecord, bool] | None:
        row = self._run(
            connection,
            f"SELECT {REPLAY_COLUMNS} FROM accepted_message"
            " WHERE accepted_by = ? AND client_txn_id = ?",
            (principal, request.client_txn_id),
        ).fetchone()
        return None if row is None else replay_of(row, request.digest, principal)

    def accept(
        self, principal: str, request: AcceptRequest, readable: Set[str]
    ) -> tuple[AcceptedRecord, bool]:
        """Record a message durably; replay on the same txn id and content."""

        def work(connection: Any) -> tuple[AcceptedRecord, bool]:
            replay = self._existing(connection, request, principal)
            if replay is not None:
                return replay
            wanted = attached_digests(request, readable)
            if wanted:
                marks = ",".join("?" * len(wanted))
                found = self._run(
                    connection,
                    f"SELECT sha256 FROM blob WHERE sha256 IN ({marks}) ORDER BY sha256"
                    + self._blob_row_lock,
                    wanted,
                ).fetchall()
                if len(found) != len(wanted):
                    raise BlobMissingError()
            session_id = request.session_id
            if not session_id:
                bound = self._run(connection, _BINDING, (principal, request.chat_key)).fetchone()
                session_id = str(bound[0]) if bound else ""
            now = self._clock()
            highest = self._run(connection, MAX_PUBLIC_SEQ).fetchone()
            public_seq = next_public_seq(now, int(highest[0]) if highest else 0)
            inserted = self._run(
                connection,
                "INSERT INTO accepted_message (client_txn_id, session_id, chat_key, text,"
                " attachments, content_digest, accepted_at, accepted_by, public_seq)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (accepted_by, client_txn_id) DO NOTHING RETURNING seq",
                (
                    request.client_txn_id,
                    session_id or None,
                    request.chat_key or None,
                    self._stored_text(request.text),
                    attachments_json(request),
                    request.digest,
                    now,
                    principal,
                    public_seq,
                ),
            ).fetchone()
            if inserted is None:
                # Another replica won the race on this txn id: replay its record.
                replay = self._existing(connection, request, principal)
                if replay is None:  # pragma: no cover - the conflict row is committed
                    raise TxnConflictError()
                return replay
            seq = int(inserted[0])
            for sha in wanted:
                self._run(
                    connection,
                    "INSERT INTO blob_ref (sha256, message_seq) VALUES (?, ?)"
                    " ON CONFLICT DO NOTHING",
                    (sha, seq),
                )
            self._retire(connection, now)
            return new_record(seq, request, session_id, now, public_seq), False

        return self._write(work)

    def _retire(self, connection: Any, now: float) -> None:
        self._run(
            connection,
            "UPDATE accepted_message SET retired_at = ? WHERE retired_at IS NULL AND ("
            " accepted_at < ? OR seq NOT IN (SELECT ranked.seq FROM (SELECT seq, ROW_NUMBER()"
            f"  OVER (PARTITION BY {PENDING_GROUP} ORDER BY seq DESC)"
            "  AS rank FROM accepted_message WHERE retired_at IS NULL) AS ranked"
            "  WHERE ranked.rank <= ?))",
            (now, now - self._ttl, self._keep),
        )
        self._run(
            connection,
            "DELETE FROM blob_ref WHERE message_seq IN"
            " (SELECT seq FROM accepted_message WHERE retired_at IS NOT NULL)",
        )

    def bind(self, principal: str, chat_key: str, session_id: str) -> int:
        """Bind `principal`'s chat key to a session; ChatKeyBoundError if it is bound elsewhere."""

        def work(connection: Any) -> int:
            self._run(
                connection,
                "INSERT INTO chat_binding (principal, chat_key, session_id, bound_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (principal, chat_key) DO NOTHING",
                (principal, chat_key, session_id, self._clock()),
            )
            row = self._run(connection, _BINDING, (principal, chat_key)).fetchone()
            if row is None or row[0] != session_id:
                raise ChatKeyBoundError()
            cursor = self._run(
                connection,
                "UPDATE accepted_message SET session_id = ? WHERE chat_key = ?"
                " AND session_id IS NULL AND accepted_by = ?",
                (session_id, chat_key, principal),
            )
            return int(cursor.rowcount)

        return self._write(work)

    def binding(self, principal: str, chat_key: str) -> str | None:
        """The session `principal`'s chat key is bound to, if any."""
        row = self._read(lambda c: self._run(c, _BINDING, (principal, chat_key)).fetchone())
        return str(row[0]) if row else None

    def followed(self, session_id: str) -> bool:
        """Whether any principal's chat key is bound to the session."""
        row = self._read(lambda c: self._run(c, _FOLLOWED, (session_id,)).fetchone())
        return row is not None

    def pending(
        self, principal: str, session_id: str, chat_key: str
    ) -> tuple[list[AcceptedRecord], int]:
        """Unretired messages (retiring the aged ones first) and the last seq, in one transaction."""

        def work(connection: Any) -> tuple[list[AcceptedRecord], int]:
            self._retire(connection, self._clock())
            values: list[str]
            if session_id:
                where, values = "session_id = ?", [session_id]
            else:
                where = "chat_key = ? AND session_id IS NULL AND accepted_by = ?"
                values = [chat_key, principal]
            rows = self._run(
                connection,
                f"SELECT {COLUMNS} FROM accepted_message WHERE retired_at IS NULL AND {where}"
                " ORDER BY seq",
                values,
            ).fetchall()
            last = self._run(connection, _LAST_SEQ).fetchone()
            return [record_of(r) for r in rows], int(last[0]) if last else 0

        return self._write(work)

    def since(
        self, principal: str, session_id: str, chat_key: str, after_seq: int
    ) -> list[AcceptedRecord]:
        """Messages of a session or of `principal`'s chat key with seq > after_seq, oldest first."""
        rows = self._read(
            lambda c: self._run(
                c,
                f"SELECT {COLUMNS} FROM accepted_message WHERE seq > ? AND"
                " (session_id = ? OR (chat_key = ? AND accepted_by = ?))"
                " ORDER BY seq LIMIT 1000",
                (after_seq, session_id or None, chat_key or None, principal),
            ).fetchall()
        )
        return [record_of(r) for r in rows]

    def last_seq(self) -> int:
        """The highest seq committed so far."""
        row = self._read(lambda c: self._run(c, _LAST_SEQ).fetchone())
        return int(row[0]) if row else 0
