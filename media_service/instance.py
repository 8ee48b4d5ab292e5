"""The media service's instance: what each RPC does, between the servicer and the library.

As BuildGrid's servicer -> instance -> storage: the servicer translates protos,
this module runs the domain calls where they belong (the open-and-verify on its
own lane, StatMedia's searches on a pool apart from the reads, thumbnail encodes
on theirs, uploads and FindMissingBlobs in threads) and holds what they share
(the decoded-image cache and the encodes).
No grpc here; the caller is always an explicit argument.

Transcripts kept in a bucket (scrollback.objects) are read with network GETs
that may retry for seconds: when the transcripts root (or Codex's) is a bucket,
the open-and-verify of a transcript image, its thumbnail's checks and the
reads of its bytes run on a bounded pool of their own (`BUCKET_READ_THREADS`),
never on the open lane (built for calls under 20 ms) nor on the default
threads that read blobs, thumbnails and local files: a stalled bucket delays
only the reads of that bucket.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
import weakref
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from media_service.blobs import MediaInfo, WrittenBlob
from media_service.config import MediaConfig
from media_service.decoded import DecodedCache, DecodedImage
from media_service.library import (
    MediaLibrary,
    OpenMedia,
    Selector,
    ThumbnailJob,
    TranscriptSelector,
)
from media_service.thumbnail_encodes import ThumbnailEncodes
from scrollback.objects import BucketLocation
from scrollback.principals import Principal
from scrollback.server.lane import Lane

# Threads that read transcripts from a bucket: each may wait on a GET for as long as
# its retries last, and callers beyond these wait for one to free up.
BUCKET_READ_THREADS = 8


def reads_a_bucket(config: MediaConfig) -> bool:
    """True if the configured transcripts (or Codex's sessions) are in a bucket."""
    locations = [config.transcripts, config.codex_sessions]
    return any(isinstance(where, BucketLocation) for where in locations)


class MediaInstance:
    """Reads, stats and thumbnails over one MediaLibrary."""

    def __init__(self, library: MediaLibrary, config: MediaConfig) -> None:
        self.library = library
        # StatMedia's transcript searches run here, apart from the default pool
        # that serves ReadMedia, so a flood of searches cannot starve reads.
        self._search_pool = ThreadPoolExecutor(
            config.search_threads, thread_name_prefix="media-search"
        )
        # Thumbnail encodes (CPU-bound): bounded in threads and memory, fair between
        # callers, shared per (original, size).
        self.thumbnail_encodes = ThumbnailEncodes(
            config.thumbnail_threads, config.thumbnail_memory_bytes
        )
        # Decoded transcript images, ready to send (media_service.decoded); 0 bytes: off.
        self.decoded = DecodedCache(config.decoded_cache_bytes)
        # The open-and-verify runs on a lane of its own (scrollback.server.lane):
        # concurrent reads then do not take the GIL from each other at every syscall.
        self._open_lane = Lane(name="media-open-lane")
        # A bucket's transcript reads, on their own bounded pool (see the module's docstring).
        self._bucket_reads = (
            ThreadPoolExecutor(BUCKET_READ_THREADS, thread_name_prefix="media-bucket-read")
            if reads_a_bucket(config)
            else None
        )

    def _reads_bucket(self, selector: Selector) -> bool:
        """True if reading `selector` means GETs from a bucket."""
        return self._bucket_reads is not None and isinstance(selector, TranscriptSelector)

    async def open(
        self, principal: Principal | None, selector: Selector, pixels: int | None
    ) -> tuple[OpenMedia, weakref.ref[DecodedImage] | None]:
        """The medium to send (the original, or its thumbnail at `pixels`), and its
        decoded image when the cache holds it."""
        if pixels is not None:
            return await self.thumbnail(principal, selector, pixels), None
        work = functools.partial(self._open, principal, selector)
        if not self._reads_bucket(selector):
            return await self._open_lane.run(work)
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # as the lane and asyncio.to_thread pass it
        media, decoded = await loop.run_in_executor(self._bucket_reads, context.run, work)
        media.read_executor = self._bucket_reads
        return media, decoded

    def _open(
        self, principal: Principal | None, selector: Selector
    ) -> tuple[OpenMedia, weakref.ref[DecodedImage] | None]:
        """The medium opened and verified, and its decoded image if cached (blocking).

        The decoded cache is consulted only once `open` has verified the line
        as it stands now.
        """
        media = self.library.open(principal, selector)
        key = media.decoded_key
        if key is None or not self.decoded.holds(media.info.size_bytes):
            return media, None
        return media, self.decoded.get(key)

    async def write_blob(
        self,
        principal: Principal | None,
        sha256: str,
        size_bytes: int,
        media_type: str,
        chunks: AsyncIterator[bytes],
    ) -> WrittenBlob:
        """Store an upload of `chunks` as declared, owned by `principal`; once it is durable.

        A failed, cut off or cancelled upload is discarded.
        """
        upload = await asyncio.to_thread(
            self.library.blobs.begin_upload, principal, sha256, size_bytes, media_type
        )
        try:
            async for data in chunks:
                await asyncio.to_thread(upload.write, data)
            return await asyncio.to_thread(upload.finish)
        except BaseException:
            upload.abort()
            raise

    async def find_missing(self, principal: Principal | None, digests: list[str]) -> list[str]:
        """The digests the store lacks or `principal` may not read, in the order asked."""
        return await asyncio.to_thread(self.library.find_missing, principal, digests)

    async def thumbnail(
        self,
        principal: Principal | None,
        selector: Selector,
        pixels: int,
        checks: ThreadPoolExecutor | None = None,
    ) -> OpenMedia:
        """The thumbnail: checks and the cache on `checks` (default: the read threads, or
        a bucket's), an encode on the thumbnail pool."""
        if checks is None and self._reads_bucket(selector):
            checks = self._bucket_reads
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(
            checks, functools.partial(self.library.thumbnail, principal, selector, pixels)
        )
        if not isinstance(found, ThumbnailJob):
            return found
        return await self.thumbnail_encodes.run(found, principal)

    async def stat(
        self,
        principal: Principal | None,
        selectors: list[Selector],
        pixels: int | None,
        time_remaining: float | None,
    ) -> list[MediaInfo | Exception]:
        """The metadata of each selector (of its thumbnail at `pixels`), or its own error.

        The work stops between slices once the caller leaves (this coroutine is
        cancelled) or `time_remaining` seconds pass, and runs on the search pool,
        never on the threads that serve reads.
        """
        if pixels is not None:
            return await self._stat_thumbnails(principal, selectors, pixels)
        stop = threading.Event()
        ends = time.monotonic() + time_remaining if time_remaining is not None else float("inf")

        def should_stop() -> bool:
            return stop.is_set() or time.monotonic() > ends

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._search_pool, self.library.stat_many, principal, selectors, should_stop
            )
        finally:
            stop.set()

    async def _stat_thumbnails(
        self, principal: Principal | None, selectors: list[Selector], pixels: int
    ) -> list[MediaInfo | Exception]:
        """Each goes the way of a thumbnail ReadMedia (so the errors are the same),
        its checks on the search pool and its encode, if it is not cached, on the
        thumbnail pool: neither occupies the threads that serve reads. A caller
        that leaves cancels the encodes not yet started. A selector asked for
        twice in one call is made once (they would all miss the cache at once).
        """

        async def one(selector: Selector) -> MediaInfo | Exception:
            try:
                media = await self.thumbnail(principal, selector, pixels, self._search_pool)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                return error
            media.close()
            return media.info

        distinct = list(dict.fromkeys(selectors))
        found = await asyncio.gather(*(one(selector) for selector in distinct))
        by_selector = dict(zip(distinct, found, strict=True))
        return [by_selector[selector] for selector in selectors]
