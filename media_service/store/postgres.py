"""The PostgreSQL backend of BlobMetadataStore, shared by several media replicas.

Bytes stay on a volume the replicas share (`<state>/blobs`); only metadata is
here. Row locks give the guarantees SQLite's single writer gives:

- `publish` locks the blob's row (`FOR UPDATE`) before it renames the file
  into place, so it waits for a collection deleting that blob to commit, and
  a collection that comes second finds the fresh created_at and keeps it;
- `delete_if_unreferenced` locks the row, then re-checks the references in a
  new statement (so it sees every committed blob_ref), and unlinks the file
  before its transaction commits;
- the history service's accept locks its blobs `FOR SHARE` while it writes
  their blob_ref rows, so a collection waits for it and then sees them.

`exclusive_gc` takes a session advisory lock (`pg_try_advisory_lock`): when
several replicas collect at once, one collects and the others skip the round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from media_service.store.base import BlobRow, blob_row, digest_batches
from scrollback.state.postgres import (
    GC_LOCK,
    Pool,
    blob_owned_by,
    blob_referencing,
    fetch_all,
    fetch_one,
    transaction,
    unavailable_on_failure,
)

Connection = psycopg.Connection[tuple[Any, ...]]


class PostgresBlobMetadataStore:
    """Blob metadata in the `blob`, `blob_ref` and `blob_owner` tables of PostgreSQL."""

    def __init__(self, pool: Pool, *, owns_pool: bool = True) -> None:
        self._pool = pool
        self._owns_pool = owns_pool

    def get(self, sha256: str) -> BlobRow | None:
        """The row of one blob, or None."""
        row = fetch_one(
            self._pool,
            "SELECT sha256, size_bytes, media_type, created_at FROM blob WHERE sha256 = %s",
            (sha256,),
        )
        return None if row is None else blob_row(row)

    def _batched(self, query: str, digests: Sequence[str], *lead: str) -> set[str]:
        def work(connection: Connection) -> set[str]:
            found: set[str] = set()
            for batch in digest_batches(digests):
                rows = connection.execute(query, (*lead, batch)).fetchall()
                found.update(str(r[0]) for r in rows)
            return found

        return transaction(self._pool, work)

    def existing(self, digests: Sequence[str]) -> set[str]:
        """Which of these digests have a row, QUERY_BATCH per query."""
        return self._batched("SELECT sha256 FROM blob WHERE sha256 = ANY(%s)", digests)

    def publish(
        self, row: BlobRow, publish_file: Callable[[], None], owner: str | None = None
    ) -> bool:
        """Lock the row, run `publish_file`, upsert the row and record the owner; commit."""

        def body(connection: Connection) -> bool:
            existed = (
                connection.execute(
                    "SELECT 1 FROM blob WHERE sha256 = %s FOR UPDATE", (row.sha256,)
                ).fetchone()
                is not None
            )
            publish_file()
            connection.execute(
                "INSERT INTO blob (sha256, size_bytes, media_type, created_at)"
                " VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (sha256) DO UPDATE SET created_at = excluded.created_at",
                (row.sha256, row.size_bytes, row.media_type, row.created_at),
            )
            if owner is not None:
                # Existed for this caller only: another's upload of these bytes stays hidden.
                existed = (
                    connection.execute(
                        "INSERT INTO blob_owner (sha256, principal, created_at)"
                        " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                        (row.sha256, owner, row.created_at),
                    ).rowcount
                    == 0
                )
            return existed

        return transaction(self._pool, body)

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (the shared read-rule query)."""
        return transaction(self._pool, lambda c: blob_owned_by(c, digests, principal))

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
        return transaction(self._pool, lambda c: blob_referencing(c, sha256))

    def unreferenced_before(self, cutoff: float, limit: int) -> list[str]:
        """Digests of blobs created before `cutoff` that no blob_ref row names."""
        rows = fetch_all(
            self._pool,
            "SELECT sha256 FROM blob WHERE created_at < %s AND NOT EXISTS"
            " (SELECT 1 FROM blob_ref WHERE blob_ref.sha256 = blob.sha256)"
            " ORDER BY created_at LIMIT %s",
            (cutoff, limit),
        )
        return [str(r[0]) for r in rows]

    def delete_if_unreferenced(
        self, sha256: str, cutoff: float, remove_file: Callable[[], None]
    ) -> bool:
        """Lock, re-check and delete one blob's row and file in one transaction."""

        def body(connection: Connection) -> bool:
            locked = connection.execute(
                "SELECT 1 FROM blob WHERE sha256 = %s AND created_at < %s FOR UPDATE",
                (sha256, cutoff),
            ).fetchone()
            if locked is None:
                return False
            referenced = connection.execute(
                "SELECT 1 FROM blob_ref WHERE sha256 = %s LIMIT 1", (sha256,)
            ).fetchone()
            if referenced is not None:
                return False
            connection.execute("DELETE FROM blob WHERE sha256 = %s", (sha256,))
            connection.execute("DELETE FROM blob_owner WHERE sha256 = %s", (sha256,))
            remove_file()
            return True

        return transaction(self._pool, body)

    @contextmanager
    def exclusive_gc(self) -> Iterator[bool]:
        """Hold the cluster-wide GC lock while the block runs; yield False if another holds it."""
        with unavailable_on_failure(), self._pool.connection() as connection:
            row = connection.execute("SELECT pg_try_advisory_lock(%s)", (GC_LOCK,)).fetchone()
            connection.commit()
            acquired = bool(row and row[0])
            try:
                yield acquired
            finally:
                if acquired:
                    connection.execute("SELECT pg_advisory_unlock(%s)", (GC_LOCK,))
                    connection.commit()

    def close(self) -> None:
        """Close the pool (when this store opened it)."""
        if self._owns_pool:
            self._pool.close()
