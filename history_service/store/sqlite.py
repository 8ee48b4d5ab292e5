"""The SQLite backend of the accepted-message store (the shared state database).

One connection (WAL, synchronous=FULL, via scrollback.state.sqlite.connect)
behind a lock; callers run these methods in a worker thread. Each write is one
`BEGIN IMMEDIATE` transaction, committed before the method returns, which is
also what serializes writers. The statements are history_service.store.accepted_sql's.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from history_service.store.accepted_sql import SqlAcceptedMessageStore
from scrollback.state.sqlite import (
    blob_owned_by,
    blob_referencing,
    connect,
    write_transaction,
)

T = TypeVar("T")


class SqliteAcceptedMessageStore(SqlAcceptedMessageStore):
    """AcceptedMessageStore on the shared SQLite state database."""

    def __init__(
        self,
        state_dir: Path,
        *,
        keep: int = 50,
        ttl_seconds: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(keep=keep, ttl_seconds=ttl_seconds, clock=clock)
        self._connection = connect(state_dir)
        self._lock = threading.Lock()

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return work(self._connection)

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return write_transaction(self._connection, work)

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (the shared read-rule query)."""
        with self._lock:
            return blob_owned_by(self._connection, digests, principal)

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
        with self._lock:
            return blob_referencing(self._connection, sha256)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()
