"""Who may read a blob: the one rule both services apply (docs/contract.md §8).

A principal may read a `media:<sha256>` blob only if it uploaded it
(`blob_owner`) or can see an accepted message that references it (it accepted
the message itself, or the message's session is in one of its projects). The
media service applies it to ReadMedia, StatMedia and FindMissingBlobs; the
history service applies it to AcceptMessage attachments, since a principal
may attach only blobs it may read. Both read the same rows of the shared state
database through `BlobAccessRecords`, which each service's store implements
with the backend queries below it (scrollback.state.sqlite / .postgres), so
there is one rule and one query per backend.

Without auth (principal None) every blob is readable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from scrollback.principals import Principal

# Below SQLite's (and PostgreSQL's) bind-parameter limits.
QUERY_BATCH = 500


def digest_batches(digests: Sequence[str]) -> Iterator[list[str]]:
    """The distinct digests (first occurrence order), QUERY_BATCH at a time."""
    unique = list(dict.fromkeys(digests))
    for start in range(0, len(unique), QUERY_BATCH):
        yield unique[start : start + QUERY_BATCH]


class BlobAccessRecords(Protocol):
    """The rows the read rule needs (every method blocks: call it from a worker thread)."""

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded."""
        ...

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages that reference a blob."""
        ...


def readable_blobs(
    records: BlobAccessRecords,
    principal: Principal | None,
    digests: Sequence[str],
    session_visible: Callable[[str], bool],
) -> set[str]:
    """Which of `digests` `principal` may read (existence is not checked here).

    `session_visible(session_id)` says whether the principal can see a session
    (the caller's transcript root answers it).
    """
    if principal is None:
        return set(digests)
    readable = records.owned_by(digests, principal.name)
    for sha256 in dict.fromkeys(digests):
        if sha256 in readable:
            continue
        for session_id, accepted_by in records.referencing(sha256):
            if accepted_by == principal.name or (session_id and session_visible(session_id)):
                readable.add(sha256)
                break
    return readable
