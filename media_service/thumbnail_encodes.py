"""Thumbnail encodes: on their own bounded pool, one encode per (original, size) at a time.

Several calls asking for the same thumbnail before it is cached (a viewer's page
opened in two tabs, a client retrying, a hostile caller repeating one request)
share one encode: the first call's job runs, the others release their original
and wait for its result (or its error). A call that leaves stops waiting; the
encode is cancelled only if nobody waits for it any more and it has not started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from concurrent.futures import ThreadPoolExecutor

from media_service.library import OpenMedia, ThumbnailJob


class _Encoding:
    """One encode in progress and how many calls wait for it."""

    def __init__(self, job: ThumbnailJob, future: concurrent.futures.Future[OpenMedia]) -> None:
        self.job = job
        self.future = future
        self.waiters = 0


class ThumbnailEncodes:
    """Runs ThumbnailJobs on `threads` threads, sharing the encodes of one key."""

    def __init__(self, threads: int) -> None:
        # Apart from the pool that serves reads: a flood of thumbnails cannot starve ReadMedia.
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="media-thumbnail")
        self._running: dict[tuple[str, int], _Encoding] = {}

    async def run(self, job: ThumbnailJob) -> OpenMedia:
        """The thumbnail `job` makes, or the one the same encode in progress makes."""
        key = (job.source.info.sha256, job.size)
        encoding = self._running.get(key)
        if encoding is None:
            encoding = _Encoding(job, self._pool.submit(job.run))
            self._running[key] = encoding
            loop = asyncio.get_running_loop()
            encoding.future.add_done_callback(
                lambda _done: loop.call_soon_threadsafe(self._forget, key, encoding)
            )
        else:
            job.close()  # the encode in progress reads its own original
        encoding.waiters += 1
        try:
            # Shielded: one caller leaving must not cancel the encode the others wait for.
            return await asyncio.shield(asyncio.wrap_future(encoding.future))
        except asyncio.CancelledError:
            if encoding.waiters == 1 and encoding.future.cancel():
                encoding.job.close()  # never started: release the original here
                self._forget(key, encoding)
            raise
        finally:
            encoding.waiters -= 1

    def _forget(self, key: tuple[str, int], encoding: _Encoding) -> None:
        if self._running.get(key) is encoding:
            del self._running[key]
