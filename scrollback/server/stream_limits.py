"""Calls in flight per principal, counted across the worker processes of one service.

`SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` is a limit on the service, and the
kernel spreads a client's connections over the workers as it likes (one
channel lands on one worker, ten channels on any), so dividing the limit by
the worker count would refuse a one-channel client at a fraction of its
budget, and a per-worker count would let a many-channel client have N times
its budget. Hence one count for the whole service: a small SQLite database
in the parent's run directory (WAL, no fsync: it lives only as long as the
service), one row per (principal, worker pid).

Admitting a call is one `BEGIN IMMEDIATE` transaction (sum the principal's
rows, refuse at the limit, else add one to this worker's row), releasing it
one UPDATE: tens of microseconds, taken on the event loop, serialized across
workers by SQLite's write lock, so two workers can never both admit the last
slot. A worker that dies takes the service down (scrollback.server.workers),
and the run directory is fresh at each start, so no count outlives its calls.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from scrollback.state.sqlite import use_wal

BUSY_TIMEOUT_SECONDS = 5.0


class SharedStreamCounter:
    """A count of calls in flight per key, shared by every process that opens `path`."""

    def __init__(self, path: Path) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS
        )
        use_wal(self._connection, BUSY_TIMEOUT_SECONDS)
        self._connection.execute("PRAGMA synchronous=OFF")
        self._connection.execute(
            "CREATE TABLE IF NOT EXISTS streams ("
            " key TEXT NOT NULL, pid INTEGER NOT NULL, n INTEGER NOT NULL,"
            " PRIMARY KEY (key, pid))"
        )

    def acquire(self, key: str, limit: int) -> bool:
        """Count one more call for `key` unless the service has `limit` already."""
        with self._lock:
            connection = self._connection
            connection.execute("BEGIN IMMEDIATE")
            try:
                row = connection.execute(
                    "SELECT COALESCE(SUM(n), 0) FROM streams WHERE key = ?", (key,)
                ).fetchone()
                if int(row[0]) >= limit:
                    connection.execute("ROLLBACK")
                    return False
                connection.execute(
                    "INSERT INTO streams (key, pid, n) VALUES (?, ?, 1)"
                    " ON CONFLICT (key, pid) DO UPDATE SET n = n + 1",
                    (key, self._pid),
                )
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            return True

    def release(self, key: str) -> None:
        """One call of `key` on this worker ended."""
        with self._lock:
            self._connection.execute(
                "UPDATE streams SET n = n - 1 WHERE key = ? AND pid = ?", (key, self._pid)
            )

    def total(self, key: str) -> int:
        """Calls of `key` in flight on every worker."""
        with self._lock:
            row = self._connection.execute(
                "SELECT COALESCE(SUM(n), 0) FROM streams WHERE key = ?", (key,)
            ).fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()
