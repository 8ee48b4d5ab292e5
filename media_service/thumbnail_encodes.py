"""Thumbnail encodes: one encode per key, run under the worker's decode budget.

Several calls asking for the same thumbnail before it is cached (a viewer's page
opened in two tabs, a client retrying, a hostile caller repeating one request)
share one encode: the first call's job runs, the others release their original
and wait for its result (or its error). A call that leaves stops waiting; the
encode is cancelled only if nobody waits for it any more and it has not started.

Each encode runs under the worker's `DecodeBudget` (scrollback.server.decode_budget):
on one of `threads` threads, once it can reserve its memory from `memory_bytes`
(SCROLLBACK_MEDIA_THUMBNAIL_MEMORY_BYTES): one decoded RGBA frame of the
original, 4 bytes per pixel of its header's dimensions, and for GIF and WebP
the whole file, which their loaders read first (scrollback.imaging's
`decode_cost`): the most an encode holds, kept until it ends. An encode larger than the whole budget reserves all
of it, so it runs alone rather than never. Turns are fair between callers (the
principal, passed explicitly; every unauthenticated caller is one): one caller
queuing many encodes delays another's by at most the encode that frees a thread.

Everything here runs on the event loop; only `ThumbnailJob.run` runs on the pool.
"""

from __future__ import annotations

import asyncio

from media_service.library import OpenMedia, ThumbnailJob
from scrollback.imaging import decode_cost
from scrollback.principals import Principal, namespace
from scrollback.server.decode_budget import DecodeBudget, DecodeTurn


class _Encoding:
    """One encode, queued or running, and how many calls wait for it."""

    def __init__(self, job: ThumbnailJob, turn: DecodeTurn[OpenMedia]) -> None:
        self.job = job
        self.turn = turn
        self.waiters = 0


class ThumbnailEncodes:
    """Runs ThumbnailJobs under a DecodeBudget of `threads` and `memory_bytes`, one per key."""

    def __init__(self, threads: int, memory_bytes: int) -> None:
        # Apart from the pool that serves reads: a flood of thumbnails cannot starve ReadMedia.
        self.budget = DecodeBudget(threads, memory_bytes, name="media-thumbnail")
        self._by_key: dict[tuple[str, int], _Encoding] = {}

    @property
    def memory_bytes(self) -> int:
        """The budget encodes reserve from."""
        return self.budget.memory_bytes

    @property
    def reserved(self) -> int:
        """Bytes reserved by the encodes running now."""
        return self.budget.reserved

    @property
    def queued(self) -> int:
        """Encodes waiting for their turn."""
        return self.budget.queued

    @property
    def running(self) -> int:
        """Encodes running now."""
        return self.budget.running

    def cost(self, job: ThumbnailJob) -> int:
        """The bytes `job` reserves: one RGBA frame of its original (and the whole file for GIF
        and WebP), at most the whole budget."""
        info = job.source.info
        cost = decode_cost(info.content_type, info.width * info.height, info.size_bytes)
        return min(self.memory_bytes, cost)

    async def run(self, job: ThumbnailJob, principal: Principal | None) -> OpenMedia:
        """The thumbnail `job` makes for `principal`, or the one the same encode makes."""
        key = (job.source.info.sha256, job.size)
        encoding = self._by_key.get(key)
        if encoding is None:
            turn = self.budget.submit(namespace(principal), self.cost(job), job.run)
            encoding = _Encoding(job, turn)
            self._by_key[key] = encoding
            turn.result.add_done_callback(lambda _: self._forget(key, encoding))
        else:
            job.close()  # the encode queued or in progress reads its own original
        encoding.waiters += 1
        try:
            # Shielded: one caller leaving must not cancel the encode the others wait for.
            return await asyncio.shield(encoding.turn.result)
        except asyncio.CancelledError:
            if encoding.waiters == 1 and not encoding.turn.started:
                encoding.turn.result.cancel()  # out of the budget's queue
                encoding.job.close()
                self._forget(key, encoding)
            raise
        finally:
            encoding.waiters -= 1

    def _forget(self, key: tuple[str, int], encoding: _Encoding) -> None:
        if self._by_key.get(key) is encoding:
            del self._by_key[key]
