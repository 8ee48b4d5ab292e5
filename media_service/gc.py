"""Garbage collection of unreferenced blobs (docs/contract.md §8).

A blob is collected only when no blob_ref row names it and it was created
(or last re-uploaded) before `now - grace`. Each deletion re-checks both in
the write transaction that deletes the row, and the file is unlinked inside
that transaction, so a concurrent accept (which writes blob_ref rows under
the same write lock) either sees the blob or finds it gone, never half.

With several replicas on one PostgreSQL database, a collection runs only
while it holds the metadata store's `exclusive_gc` lock: a replica that finds
another collecting skips the round (`GcReport.locked_out`). The per-blob
re-check keeps even overlapping collections correct; the lock keeps them from
doing the work twice.

Used by the media server's periodic task and by `scrollback gc`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field

from media_service.blobs import BlobStore

log = logging.getLogger(__name__)

GC_BATCH = 500


@dataclass
class GcReport:
    """What one collection did."""

    now: float
    cutoff: float
    deleted: list[str] = field(default_factory=list)
    skipped: int = 0
    locked_out: bool = False


def collect_garbage(
    store: BlobStore, *, now: float | None = None, grace_seconds: float = 3600.0
) -> GcReport:
    """Delete every unreferenced blob older than the grace period; return a report."""
    when = time.time() if now is None else now
    cutoff = when - grace_seconds
    report = GcReport(now=when, cutoff=cutoff)
    with store.metadata.exclusive_gc() as acquired:
        if not acquired:
            report.locked_out = True
            log.info("gc skipped: another replica is collecting")
            return report
        _collect(store, cutoff, report)
    if report.deleted:
        log.info("gc removed %d unreferenced blobs", len(report.deleted))
    return report


def _collect(store: BlobStore, cutoff: float, report: GcReport) -> None:
    seen: set[str] = set()
    while True:
        candidates = [
            d
            for d in store.metadata.unreferenced_before(cutoff, GC_BATCH + len(seen))
            if d not in seen
        ]
        if not candidates:
            break
        for sha256 in candidates:
            seen.add(sha256)
            path = store.paths.blob(sha256)

            def remove(target: os.PathLike[str] = path) -> None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)

            if store.metadata.delete_if_unreferenced(sha256, cutoff, remove):
                report.deleted.append(sha256)
            else:
                report.skipped += 1
