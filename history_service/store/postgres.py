"""The PostgreSQL backend of the accepted-message store, shared by several replicas.

The statements are history_service.store.accepted_sql's, on a pooled
connection per call (scrollback.state.postgres). Every write transaction
first takes one transaction-scoped advisory lock, the counterpart of SQLite's
`BEGIN IMMEDIATE`: writers of all replicas serialize, so seqs commit in the
order they are assigned (a watcher reading `seq > last` can never skip a seq
that commits later) and the ageing updates cannot deadlock.

A message's text is stored as its UTF-8 bytes (BYTEA, migration 9), so it
keeps a U+0000 exactly as SQLite's TEXT does (scrollback.contract.text).
Attachments' blob rows are locked `FOR SHARE` while the blob_ref rows are
written, so a concurrent garbage collection either sees the references or
has already removed the blob (BlobMissingError), never half.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from history_service.store.accepted_sql import SqlAcceptedMessageStore
from scrollback.state.postgres import (
    ACCEPT_LOCK,
    Pool,
    blob_owned_by,
    blob_referencing,
    transaction,
)

Connection = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")


class PostgresAcceptedMessageStore(SqlAcceptedMessageStore):
    """AcceptedMessageStore on a PostgreSQL database shared by the replicas."""

    _mark = "%s"
    _blob_row_lock = " FOR SHARE"

    def __init__(
        self,
        pool: Pool,
        *,
        keep: int = 50,
        ttl_seconds: float = 600.0,
        clock: Callable[[], float] = time.time,
        owns_pool: bool = True,
    ) -> None:
        super().__init__(keep=keep, ttl_seconds=ttl_seconds, clock=clock)
        self._pool = pool
        self._owns_pool = owns_pool

    @property
    def pool(self) -> Pool:
        """The connection pool (the insight index shares it)."""
        return self._pool

    def _read(self, work: Callable[[Connection], T]) -> T:
        return transaction(self._pool, work)

    def _write(self, work: Callable[[Connection], T]) -> T:
        def locked(connection: Connection) -> T:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (ACCEPT_LOCK,))
            return work(connection)

        return transaction(self._pool, locked)

    def _stored_text(self, text: str) -> bytes:
        return text.encode()

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (the shared read-rule query)."""
        return transaction(self._pool, lambda c: blob_owned_by(c, digests, principal))

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
        return transaction(self._pool, lambda c: blob_referencing(c, sha256))

    def close(self) -> None:
        """Close the pool (when this store opened it)."""
        if self._owns_pool:
            self._pool.close()
