"""Thumbnail encodes: a bounded pool, a memory budget, fair turns, one encode per key.

Several calls asking for the same thumbnail before it is cached (a viewer's page
opened in two tabs, a client retrying, a hostile caller repeating one request)
share one encode: the first call's job runs, the others release their original
and wait for its result (or its error). A call that leaves stops waiting; the
encode is cancelled only if nobody waits for it any more and it has not started.

An encode starts only when a thread is free and it can reserve its memory from
the worker's budget (`memory_bytes`, SCROLLBACK_MEDIA_THUMBNAIL_MEMORY_BYTES):
one decoded RGBA frame of the original, 4 bytes per pixel of its header's
dimensions, the most an encode holds. It keeps that reservation until it ends.
An encode larger than the whole budget reserves all of it, so it runs alone
rather than never. Until then it waits in its caller's queue.

Turns are fair between callers: each principal (the caller, passed
explicitly; every unauthenticated caller is one) has a queue of its own, and
the next encode to start is the head of the queue of the principal with the
fewest encodes running, the one served longest ago among equals. One caller
queuing many encodes therefore delays another's by at most the encode that
frees a thread. A head that does not fit the budget waits (nothing overtakes
it), so a large encode is never starved by a stream of small ones.

Everything here runs on the event loop; only `ThumbnailJob.run` runs on the pool.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from media_service.library import OpenMedia, ThumbnailJob
from scrollback.principals import Principal, namespace

# A decoded frame is RGBA at most: the bytes an encode reserves per pixel.
BYTES_PER_PIXEL = 4


class _Encoding:
    """One encode, queued or running, and how many calls wait for it."""

    def __init__(self, job: ThumbnailJob, owner: str, cost: int) -> None:
        self.job = job
        self.owner = owner
        self.cost = cost
        self.result: asyncio.Future[OpenMedia] = asyncio.get_running_loop().create_future()
        # Nobody may be left to read an error: retrieving it here keeps asyncio quiet.
        self.result.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.waiters = 0
        self.started = False


class ThumbnailEncodes:
    """Runs ThumbnailJobs on `threads` threads within `memory_bytes`, fairly between callers."""

    def __init__(self, threads: int, memory_bytes: int) -> None:
        # Apart from the pool that serves reads: a flood of thumbnails cannot starve ReadMedia.
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="media-thumbnail")
        self._threads = threads
        self.memory_bytes = memory_bytes
        self._by_key: dict[tuple[str, int], _Encoding] = {}
        self._queues: dict[str, deque[_Encoding]] = {}
        self._running: dict[str, int] = {}
        self._last_turn: dict[str, int] = {}
        self._turns = itertools.count()
        self._started = 0
        # Bytes reserved by the encodes running now (tests and metrics read it).
        self.reserved = 0

    @property
    def queued(self) -> int:
        """Encodes waiting for their turn."""
        return sum(len(queue) for queue in self._queues.values())

    @property
    def running(self) -> int:
        """Encodes running now."""
        return self._started

    def cost(self, job: ThumbnailJob) -> int:
        """The bytes `job` reserves: one RGBA frame of its original, at most the whole budget."""
        info = job.source.info
        return min(self.memory_bytes, max(1, info.width * info.height * BYTES_PER_PIXEL))

    async def run(self, job: ThumbnailJob, principal: Principal | None) -> OpenMedia:
        """The thumbnail `job` makes for `principal`, or the one the same encode makes."""
        key = (job.source.info.sha256, job.size)
        encoding = self._by_key.get(key)
        if encoding is None:
            encoding = _Encoding(job, namespace(principal), self.cost(job))
            self._by_key[key] = encoding
            self._queues.setdefault(encoding.owner, deque()).append(encoding)
            self._dispatch()
        else:
            job.close()  # the encode queued or in progress reads its own original
        encoding.waiters += 1
        try:
            # Shielded: one caller leaving must not cancel the encode the others wait for.
            return await asyncio.shield(encoding.result)
        except asyncio.CancelledError:
            if encoding.waiters == 1 and not encoding.started:
                self._drop(key, encoding)
            raise
        finally:
            encoding.waiters -= 1

    def _drop(self, key: tuple[str, int], encoding: _Encoding) -> None:
        """Remove a queued encode nobody waits for, releasing its original."""
        queue = self._queues.get(encoding.owner)
        if queue is not None and encoding in queue:
            queue.remove(encoding)
            if not queue:
                del self._queues[encoding.owner]
        encoding.job.close()
        encoding.result.cancel()
        self._forget(key, encoding)
        self._dispatch()

    def _next_owner(self) -> str | None:
        if not self._queues:
            return None
        return min(
            self._queues,
            key=lambda owner: (self._running.get(owner, 0), self._last_turn.get(owner, -1)),
        )

    def _dispatch(self) -> None:
        """Start queued encodes while a thread is free and the next one's cost fits."""
        while self._started < self._threads:
            owner = self._next_owner()
            if owner is None:
                return
            queue = self._queues[owner]
            encoding = queue[0]
            if self._started and self.reserved + encoding.cost > self.memory_bytes:
                return  # it waits for memory; nothing overtakes it
            queue.popleft()
            if not queue:
                del self._queues[owner]
            self._start(encoding)

    def _start(self, encoding: _Encoding) -> None:
        encoding.started = True
        self._started += 1
        self.reserved += encoding.cost
        self._running[encoding.owner] = self._running.get(encoding.owner, 0) + 1
        self._last_turn[encoding.owner] = next(self._turns)
        future = asyncio.wrap_future(self._pool.submit(encoding.job.run))
        future.add_done_callback(lambda done: self._finished(encoding, done))

    def _finished(self, encoding: _Encoding, done: asyncio.Future[OpenMedia]) -> None:
        self._started -= 1
        self.reserved -= encoding.cost
        running = self._running[encoding.owner] - 1
        if running:
            self._running[encoding.owner] = running
        else:
            del self._running[encoding.owner]
            if encoding.owner not in self._queues:
                self._last_turn.pop(encoding.owner, None)
        if not encoding.result.done():
            error = done.exception()
            if error is None:
                encoding.result.set_result(done.result())
            else:
                encoding.result.set_exception(error)
        self._forget((encoding.job.source.info.sha256, encoding.job.size), encoding)
        self._dispatch()

    def _forget(self, key: tuple[str, int], encoding: _Encoding) -> None:
        if self._by_key.get(key) is encoding:
            del self._by_key[key]
