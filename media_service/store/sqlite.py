"""The SQLite backend of BlobMetadataStore, on the shared state database.

It uses `scrollback.state.sqlite.connect` (WAL, synchronous=FULL, migrated) and
`BEGIN IMMEDIATE` for writes, so it serializes with the history service's
accept transaction that writes blob_ref rows. One connection, guarded by a
lock: callers run these methods in worker threads.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from media_service.store.base import BlobRow, blob_row, digest_batches
from scrollback.state.sqlite import (
    blob_owned_by,
    blob_referencing,
    connect,
    write_transaction,
)


class SqliteBlobMetadataStore:
    """Blob metadata in the `blob` table of the state database."""

    def __init__(self, state_dir: Path) -> None:
        self._connection: sqlite3.Connection = connect(state_dir)
        self._lock = threading.Lock()

    def get(self, sha256: str) -> BlobRow | None:
        """The row of one blob, or None."""
        with self._lock:
            row = self._connection.execute(
                "SELECT sha256, size_bytes, media_type, created_at FROM blob WHERE sha256 = ?",
                (sha256,),
            ).fetchone()
        return None if row is None else blob_row(row)

    def existing(self, digests: Sequence[str]) -> set[str]:
        """Which of these digests have a row, QUERY_BATCH per query."""
        found: set[str] = set()
        with self._lock:
            for batch in digest_batches(digests):
                marks = ",".join("?" * len(batch))
                rows = self._connection.execute(
                    f"SELECT sha256 FROM blob WHERE sha256 IN ({marks})", batch
                ).fetchall()
                found.update(r[0] for r in rows)
        return found

    def _write(self, body: Callable[[sqlite3.Connection], bool]) -> bool:
        with self._lock:
            return write_transaction(self._connection, body)

    def publish(
        self, row: BlobRow, publish_file: Callable[[], None], owner: str | None = None
    ) -> bool:
        """Run `publish_file`, upsert the row and record the owner in one write transaction."""

        def body(connection: sqlite3.Connection) -> bool:
            existed = (
                connection.execute("SELECT 1 FROM blob WHERE sha256 = ?", (row.sha256,)).fetchone()
                is not None
            )
            publish_file()
            connection.execute(
                "INSERT INTO blob (sha256, size_bytes, media_type, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (sha256) DO UPDATE SET created_at = excluded.created_at",
                (row.sha256, row.size_bytes, row.media_type, row.created_at),
            )
            if owner is not None:
                # Existed for this caller only: another's upload of these bytes stays hidden.
                existed = (
                    connection.execute(
                        "INSERT OR IGNORE INTO blob_owner (sha256, principal, created_at)"
                        " VALUES (?, ?, ?)",
                        (row.sha256, owner, row.created_at),
                    ).rowcount
                    == 0
                )
            return existed

        return self._write(body)

    def unreferenced_before(self, cutoff: float, limit: int) -> list[str]:
        """Digests of blobs created before `cutoff` that no blob_ref row names."""
        with self._lock:
            rows = self._connection.execute(
                "SELECT sha256 FROM blob WHERE created_at < ? AND NOT EXISTS"
                " (SELECT 1 FROM blob_ref WHERE blob_ref.sha256 = blob.sha256)"
                " ORDER BY created_at LIMIT ?",
                (cutoff, limit),
            ).fetchall()
        return [r[0] for r in rows]

    def delete_if_unreferenced(
        self, sha256: str, cutoff: float, remove_file: Callable[[], None]
    ) -> bool:
        """Re-check and delete one blob's row and file in one write transaction."""

        def body(connection: sqlite3.Connection) -> bool:
            deleted = connection.execute(
                "DELETE FROM blob WHERE sha256 = ? AND created_at < ? AND NOT EXISTS"
                " (SELECT 1 FROM blob_ref WHERE blob_ref.sha256 = blob.sha256)",
                (sha256, cutoff),
            ).rowcount
            if deleted:
                connection.execute("DELETE FROM blob_owner WHERE sha256 = ?", (sha256,))
                remove_file()
            return bool(deleted)

        return self._write(body)

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (the shared read-rule query)."""
        with self._lock:
            return blob_owned_by(self._connection, digests, principal)

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
        with self._lock:
            return blob_referencing(self._connection, sha256)

    @contextmanager
    def exclusive_gc(self) -> Iterator[bool]:
        """Always granted: each deletion is its own `BEGIN IMMEDIATE` transaction,
        so collectors of one SQLite file already serialize safely."""
        yield True

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()
