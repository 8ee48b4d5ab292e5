"""The BlobMetadataStore Protocol: what the blob store needs from its database.

File operations that must not interleave with another process's (publishing
an upload, deleting a collected blob) are passed in as callbacks and run while
the backend holds its write lock, inside the transaction that changes the row:
a GC can never unlink a file that an upload has just re-published.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

# Below SQLite's (and PostgreSQL's) bind-parameter limits.
QUERY_BATCH = 500


@dataclass(frozen=True, slots=True)
class BlobRow:
    """One blob's metadata."""

    sha256: str
    size_bytes: int
    media_type: str
    created_at: float


class BlobMetadataStore(Protocol):
    """Blob metadata, with the transactions the blob store relies on."""

    def get(self, sha256: str) -> BlobRow | None:
        """The row of one blob, or None."""
        ...

    def existing(self, digests: Sequence[str]) -> set[str]:
        """Which of these digests have a row (queried in batches)."""
        ...

    def publish(self, row: BlobRow, publish_file: Callable[[], None]) -> bool:
        """In one write transaction: run `publish_file`, then upsert the row.

        An existing row keeps its size and media type and gets the new
        created_at (a fresh grace period). Return True if the row existed.
        """
        ...

    def unreferenced_before(self, cutoff: float, limit: int) -> list[str]:
        """Digests of blobs created before `cutoff` with no blob_ref row."""
        ...

    def delete_if_unreferenced(
        self, sha256: str, cutoff: float, remove_file: Callable[[], None]
    ) -> bool:
        """In one write transaction, re-check the blob is still unreferenced and
        older than `cutoff`; if so delete its row and run `remove_file`. Return
        True if deleted.
        """
        ...

    def close(self) -> None:
        """Release the connection."""
        ...
