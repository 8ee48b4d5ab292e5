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

Thumbnails (media_service/thumbnails.py) are a cache and follow their
original. A thumbnail of a blob is removed with the blob, right after its row
is deleted. A thumbnail whose original is no blob (a transcript image, or a
blob already gone) is removed once it has not been used (its mtime, refreshed
on each cache hit) for the grace period; a later request makes it again. A
thumbnail written by a request racing the deletion of its blob is swept the
same way.

Used by the media server's periodic task and by `scrollback gc`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from media_service.blobs import BlobStore
from media_service.thumbnails import ThumbnailCache

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
    thumbnails_deleted: int = 0


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
        _collect_thumbnails(store, cutoff, report)
    if report.deleted or report.thumbnails_deleted:
        log.info(
            "gc removed %d unreferenced blobs and %d thumbnails",
            len(report.deleted),
            report.thumbnails_deleted,
        )
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
                report.thumbnails_deleted += ThumbnailCache(store.paths).remove(sha256)
            else:
                report.skipped += 1


def _collect_thumbnails(store: BlobStore, cutoff: float, report: GcReport) -> None:
    """Remove thumbnails of originals that are no blob, unused since `cutoff`."""
    batch: list[tuple[str, list[Path]]] = []
    for found in ThumbnailCache(store.paths).originals():
        batch.append(found)
        if len(batch) >= GC_BATCH:
            _sweep_thumbnails(store, batch, cutoff, report)
            batch = []
    _sweep_thumbnails(store, batch, cutoff, report)


def _sweep_thumbnails(
    store: BlobStore, batch: list[tuple[str, list[Path]]], cutoff: float, report: GcReport
) -> None:
    if not batch:
        return
    blobs = store.metadata.existing([sha256 for sha256, _ in batch])
    for sha256, files in batch:
        if sha256 in blobs:
            continue  # removed with its blob
        for path in files:
            try:
                if os.stat(path).st_mtime < cutoff:
                    os.unlink(path)
                    report.thumbnails_deleted += 1
            except FileNotFoundError:
                continue
        with contextlib.suppress(OSError):
            store.paths.thumbnail_dir(sha256).rmdir()  # only once empty
