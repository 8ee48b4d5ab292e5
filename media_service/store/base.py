"""The BlobMetadataStore Protocol: what the blob store needs from its database.

File operations that must not interleave with another process's (publishing
an upload, deleting a collected blob) are passed in as callbacks and run while
the backend holds its write lock, inside the transaction that changes the row:
a GC can never unlink a file that an upload has just re-published.

Backends: `sqlite` (the embedded default) and `postgres` (several replicas
over one database); media_service.server picks one from the configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

# Shared with the history store: the blob read rule's queries batch the same way.
from scrollback.state.blob_access import QUERY_BATCH, digest_batches

__all__ = ["QUERY_BATCH", "BlobMetadataStore", "BlobRow", "blob_row", "digest_batches"]


@dataclass(frozen=True, slots=True)
class BlobRow:
    """One blob's metadata."""

    sha256: str
    size_bytes: int
    media_type: str
    created_at: float


def blob_row(row: tuple[Any, ...]) -> BlobRow:
    """The BlobRow of a `sha256, size_bytes, media_type, created_at` row."""
    return BlobRow(row[0], int(row[1]), row[2], float(row[3]))


class BlobMetadataStore(Protocol):
    """Blob metadata, with the transactions the blob store relies on."""

    def get(self, sha256: str) -> BlobRow | None:
        """The row of one blob, or None."""
        ...

    def existing(self, digests: Sequence[str]) -> set[str]:
        """Which of these digests have a row (queried in batches)."""
        ...

    def publish(
        self, row: BlobRow, publish_file: Callable[[], None], owner: str | None = None
    ) -> bool:
        """In one write transaction: run `publish_file`, then upsert the row
        (and record `owner` as one of the blob's uploaders, when given).

        An existing row keeps its size and media type and gets the new
        created_at (a fresh grace period). Return True if the row existed
        for this caller: with an `owner`, if `owner` had already uploaded it
        (another principal's upload of the same bytes is never revealed).
        A backend may run the transaction, `publish_file` included, a second
        time when its connection broke (scrollback.state.postgres.transaction).
        """
        ...

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded."""
        ...

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages that reference a blob."""
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

    def exclusive_gc(self) -> AbstractContextManager[bool]:
        """While the block runs, be the only collector of the database: yield True,
        or False when another process's collection holds it (skip this round).
        """
        ...

    def close(self) -> None:
        """Release the connection."""
        ...
