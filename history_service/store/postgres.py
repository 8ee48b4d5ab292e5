"""The PostgreSQL backend of the accepted-message store, shared by several replicas.

The same rules as the SQLite backend (history_service.store.sqlite), on a
pooled connection per call (scrollback.state.postgres). Every write
transaction first takes one transaction-scoped advisory lock, the counterpart
of SQLite's `BEGIN IMMEDIATE`: writers of all replicas serialize, so seqs
commit in the order they are assigned (a watcher reading `seq > last` can
never skip a seq that commits later) and the ageing updates cannot deadlock.

A message's text is stored as its UTF-8 bytes (BYTEA, migration 9), so it
keeps a U+0000 exactly as SQLite's TEXT does (scrollback.contract.text).

Idempotency across replicas: `client_txn_id` is UNIQUE per principal and the insert is
`ON CONFLICT DO NOTHING`; a loser re-reads the winner's row and replays it
(or reports the conflict), so a race of two replicas records one message.
Attachments' blob rows are locked `FOR SHARE` while the blob_ref rows are
written, so a concurrent garbage collection either sees the references or
has already removed the blob (BlobMissingError), never half.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence, Set
from typing import Any

import psycopg

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
from scrollback.state.postgres import (
    ACCEPT_LOCK,
    Pool,
    blob_owned_by,
    blob_referencing,
    fetch_all,
    fetch_one,
    transaction,
)

Connection = psycopg.Connection[tuple[Any, ...]]


class PostgresAcceptedMessageStore:
    """AcceptedMessageStore on a PostgreSQL database shared by the replicas."""

    def __init__(
        self,
        pool: Pool,
        *,
        keep: int = 50,
        ttl_seconds: float = 600.0,
        clock: Callable[[], float] = time.time,
        owns_pool: bool = True,
    ) -> None:
        self._pool = pool
        self._keep = keep
        self._ttl = ttl_seconds
        self._clock = clock
        self._owns_pool = owns_pool

    @property
    def pool(self) -> Pool:
        """The connection pool (the insight index shares it)."""
        return self._pool

    @staticmethod
    def _lock(connection: Connection) -> None:
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (ACCEPT_LOCK,))

    @staticmethod
    def _existing(
        connection: Connection, request: AcceptRequest, digest: str, principal: str
    ) -> tuple[AcceptedRecord, bool] | None:
        row = connection.execute(
            f"SELECT {REPLAY_COLUMNS} FROM accepted_message"
            " WHERE accepted_by = %s AND client_txn_id = %s",
            (principal, request.client_txn_id),
        ).fetchone()
        return None if row is None else replay_of(row, digest, principal)

    def accept(
        self, principal: str, request: AcceptRequest, readable: Set[str]
    ) -> tuple[AcceptedRecord, bool]:
        """Record a message durably; replay on the same txn id and content."""
        digest = request.digest

        def work(connection: Connection) -> tuple[AcceptedRecord, bool]:
            self._lock(connection)
            replay = self._existing(connection, request, digest, principal)
            if replay is not None:
                return replay
            wanted = attached_digests(request, readable)
            if wanted:
                found = connection.execute(
                    "SELECT sha256 FROM blob WHERE sha256 = ANY(%s) ORDER BY sha256 FOR SHARE",
                    (wanted,),
                ).fetchall()
                if len(found) != len(wanted):
                    raise BlobMissingError()
            session_id = request.session_id
            if not session_id:
                bound = connection.execute(
                    "SELECT session_id FROM chat_binding WHERE principal = %s AND chat_key = %s",
                    (principal, request.chat_key),
                ).fetchone()
                session_id = str(bound[0]) if bound else ""
            now = self._clock()
            highest = connection.execute(MAX_PUBLIC_SEQ).fetchone()
            public_seq = next_public_seq(now, int(highest[0]) if highest else 0)
            inserted = connection.execute(
                "INSERT INTO accepted_message (client_txn_id, session_id, chat_key, text,"
                " attachments, content_digest, accepted_at, accepted_by, public_seq)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (accepted_by, client_txn_id) DO NOTHING RETURNING seq",
                (
                    request.client_txn_id,
                    session_id or None,
                    request.chat_key or None,
                    request.text.encode(),
                    attachments_json(request),
                    digest,
                    now,
                    principal,
                    public_seq,
                ),
            ).fetchone()
            if inserted is None:
                # Another replica won the race on this txn id: replay its record.
                replay = self._existing(connection, request, digest, principal)
                if replay is None:  # pragma: no cover - the conflict row is committed
                    raise TxnConflictError()
                return replay
            seq = int(inserted[0])
            if wanted:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO blob_ref (sha256, message_seq) VALUES (%s, %s)"
                        " ON CONFLICT DO NOTHING",
                        [(sha, seq) for sha in wanted],
                    )
            self._retire(connection, now)
            return new_record(seq, request, session_id, now, public_seq), False

        return transaction(self._pool, work)

    def _retire(self, connection: Connection, now: float) -> None:
        connection.execute(
            "UPDATE accepted_message SET retired_at = %s WHERE retired_at IS NULL AND ("
            " accepted_at < %s OR seq NOT IN (SELECT ranked.seq FROM (SELECT seq, ROW_NUMBER()"
            f"  OVER (PARTITION BY {PENDING_GROUP} ORDER BY seq DESC)"
            "  AS rank FROM accepted_message WHERE retired_at IS NULL) AS ranked"
            "  WHERE ranked.rank <= %s))",
            (now, now - self._ttl, self._keep),
        )
        connection.execute(
            "DELETE FROM blob_ref WHERE message_seq IN"
            " (SELECT seq FROM accepted_message WHERE retired_at IS NOT NULL)"
        )

    def bind(self, principal: str, chat_key: str, session_id: str) -> int:
        """Bind `principal`'s chat key to a session; ChatKeyBoundError if it is bound elsewhere."""

        def work(connection: Connection) -> int:
            self._lock(connection)
            connection.execute(
                "INSERT INTO chat_binding (principal, chat_key, session_id, bound_at)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (principal, chat_key) DO NOTHING",
                (principal, chat_key, session_id, self._clock()),
            )
            row = connection.execute(
                "SELECT session_id FROM chat_binding WHERE principal = %s AND chat_key = %s",
                (principal, chat_key),
            ).fetchone()
            if row is None or row[0] != session_id:
                raise ChatKeyBoundError()
            cursor = connection.execute(
                "UPDATE accepted_message SET session_id = %s WHERE chat_key = %s"
                " AND session_id IS NULL AND accepted_by = %s",
                (session_id, chat_key, principal),
            )
            return int(cursor.rowcount)

        return transaction(self._pool, work)

    def binding(self, principal: str, chat_key: str) -> str | None:
        """The session `principal`'s chat key is bound to, if any."""
        row = fetch_one(
            self._pool,
            "SELECT session_id FROM chat_binding WHERE principal = %s AND chat_key = %s",
            (principal, chat_key),
        )
        return str(row[0]) if row else None

    def pending(
        self, principal: str, session_id: str, chat_key: str
    ) -> tuple[list[AcceptedRecord], int]:
        """Unretired messages (retiring the aged ones first) and the last seq, in one transaction."""

        def work(connection: Connection) -> tuple[list[AcceptedRecord], int]:
            self._lock(connection)
            self._retire(connection, self._clock())
            values: list[str]
            if session_id:
                where, values = "session_id = %s", [session_id]
            else:
                where = "chat_key = %s AND session_id IS NULL AND accepted_by = %s"
                values = [chat_key, principal]
            rows = connection.execute(
                f"SELECT {COLUMNS} FROM accepted_message WHERE retired_at IS NULL AND {where}"
                " ORDER BY seq",
                values,
            ).fetchall()
            last = connection.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM accepted_message"
            ).fetchone()
            return [record_of(r) for r in rows], int(last[0]) if last else 0

        return transaction(self._pool, work)

    def since(
        self, principal: str, session_id: str, chat_key: str, after_seq: int
    ) -> list[AcceptedRecord]:
        """Messages of a session or of `principal`'s chat key with seq > after_seq, oldest first."""
        rows = fetch_all(
            self._pool,
            f"SELECT {COLUMNS} FROM accepted_message WHERE seq > %s AND"
            " (session_id = %s OR (chat_key = %s AND accepted_by = %s))"
            " ORDER BY seq LIMIT 1000",
            (after_seq, session_id or None, chat_key or None, principal),
        )
        return [record_of(r) for r in rows]

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (the shared read-rule query)."""
        return transaction(self._pool, lambda c: blob_owned_by(c, digests, principal))

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
        return transaction(self._pool, lambda c: blob_referencing(c, sha256))

    def last_seq(self) -> int:
        """The highest seq committed so far."""
        row = fetch_one(self._pool, "SELECT COALESCE(MAX(seq), 0) FROM accepted_message")
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close the pool (when this store opened it)."""
        if self._owns_pool:
            self._pool.close()
