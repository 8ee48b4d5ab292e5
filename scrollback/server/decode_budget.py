"""`DecodeBudget`: a worker's image decodes, on bounded threads within a memory budget, in fair turns.

Decoding an image takes memory with its pixels, not with its bytes: a quarter
of a megabyte of PNG may claim 64 megapixels. Every decode of a worker process
(a thumbnail in the media service, a downscale of a slim copy in the history
service) therefore goes through one `DecodeBudget`, which runs it on a thread
of its own pool (`threads`, apart from the threads that serve reads) once it
can reserve its cost from `memory_bytes`. The cost is the caller's estimate
of the most the decode holds (scrollback.imaging's `decode_cost`: one decoded
RGBA frame of the image, 4 bytes per pixel of its header's dimensions, and the
whole file for the formats whose loader reads it first). A decode keeps its
reservation until it ends, even when its caller has left. One whose cost
exceeds the whole budget reserves all of it, so it runs alone rather than
never; a caller that would rather not decode such an image asks `fits` first.

Turns are fair between principals: each (every unauthenticated caller is one)
has a queue of its own, and the next decode to start is the head of the
queue of the principal with the fewest decodes running, the one served
longest ago among equals. One caller queuing many decodes therefore delays
another's by at most the decode that frees a thread. A head that does not fit
the budget waits (nothing overtakes it), so a large decode is never starved by
a stream of small ones.

`submit` queues a decode and returns its `DecodeTurn`; cancelling the turn's
result before the decode started takes it out of its queue, and awaiting
`run` does the same when the awaiting task is cancelled; a task cancelled
while its decode runs leaves `run` only when the decode ended, so the file the
decode reads is not closed under it. Everything here runs
on the event loop; only the decodes themselves run on the pool.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class DecodeTurn(Generic[T]):
    """One decode, queued or running: its owner, cost and result."""

    def __init__(self, owner: str, cost: int, work: Callable[[], T]) -> None:
        self.owner = owner
        self.cost = cost
        self.work = work
        self.result: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        # Nobody may be left to read an error: retrieving it here keeps asyncio quiet.
        self.result.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.started = False
        self.ended = asyncio.Event()


class DecodeBudget:
    """Runs decodes on `threads` threads within `memory_bytes`, fairly between principals."""

    def __init__(self, threads: int, memory_bytes: int, name: str = "decode") -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._threads = threads
        self.memory_bytes = memory_bytes
        self._queues: dict[str, deque[DecodeTurn[object]]] = {}
        self._running: dict[str, int] = {}
        self._last_turn: dict[str, int] = {}
        self._turns = itertools.count()
        self._started = 0
        # Bytes reserved by the decodes running now (tests and metrics read it).
        self.reserved = 0

    @property
    def queued(self) -> int:
        """Decodes waiting for their turn."""
        return sum(len(queue) for queue in self._queues.values())

    @property
    def running(self) -> int:
        """Decodes running now."""
        return self._started

    def fits(self, cost: int) -> bool:
        """True if a decode of `cost` bytes fits the budget at all (it may still wait)."""
        return cost <= self.memory_bytes

    def submit(self, owner: str, cost: int, work: Callable[[], T]) -> DecodeTurn[T]:
        """Queue `work` for `owner` (a principal's namespace); its turn, started when due."""
        turn = DecodeTurn(owner, min(self.memory_bytes, max(1, cost)), work)
        turn.result.add_done_callback(lambda done: self._left(turn) if done.cancelled() else None)
        self._queues.setdefault(owner, deque()).append(turn)  # type: ignore[arg-type]
        self._dispatch()
        return turn

    async def run(self, owner: str, cost: int, work: Callable[[], T]) -> T:
        """`work`'s result once it ran in its turn.

        Cancelled before the turn started, it leaves the queue; cancelled while `work`
        runs, it returns (cancelled) only once `work` ended, since `work` reads what the
        caller holds open (a transcript) and the caller closes it as it leaves.
        """
        turn = self.submit(owner, cost, work)
        try:
            return await asyncio.shield(turn.result)
        except asyncio.CancelledError:
            if turn.started:
                await turn.ended.wait()
            else:
                turn.result.cancel()
            raise

    def _left(self, turn: DecodeTurn[T]) -> None:
        """A turn cancelled before it started leaves its queue; a started one runs on."""
        if turn.started:
            return
        queue = self._queues.get(turn.owner)
        if queue is not None and turn in queue:
            queue.remove(turn)  # type: ignore[arg-type]
            if not queue:
                del self._queues[turn.owner]
        self._dispatch()

    def _next_owner(self) -> str | None:
        if not self._queues:
            return None
        return min(
            self._queues,
            key=lambda owner: (self._running.get(owner, 0), self._last_turn.get(owner, -1)),
        )

    def _dispatch(self) -> None:
        """Start queued decodes while a thread is free and the next one's cost fits."""
        while self._started < self._threads:
            owner = self._next_owner()
            if owner is None:
                return
            queue = self._queues[owner]
            turn = queue[0]
            if turn.result.done():  # cancelled: its callback has not run yet
                queue.popleft()
                if not queue:
                    del self._queues[owner]
                continue
            if self._started and self.reserved + turn.cost > self.memory_bytes:
                return  # it waits for memory; nothing overtakes it
            queue.popleft()
            if not queue:
                del self._queues[owner]
            self._start(turn)

    def _start(self, turn: DecodeTurn[object]) -> None:
        turn.started = True
        self._started += 1
        self.reserved += turn.cost
        self._running[turn.owner] = self._running.get(turn.owner, 0) + 1
        self._last_turn[turn.owner] = next(self._turns)
        future = asyncio.wrap_future(self._pool.submit(turn.work))
        future.add_done_callback(lambda done: self._finished(turn, done))

    def _finished(self, turn: DecodeTurn[object], done: asyncio.Future[object]) -> None:
        turn.ended.set()
        self._started -= 1
        self.reserved -= turn.cost
        running = self._running[turn.owner] - 1
        if running:
            self._running[turn.owner] = running
        else:
            del self._running[turn.owner]
            if turn.owner not in self._queues:
                self._last_turn.pop(turn.owner, None)
        if done.cancelled():
            turn.result.cancel()
        elif not turn.result.done():
            error = done.exception()
            if error is None:
                turn.result.set_result(done.result())
            else:
                turn.result.set_exception(error)
        self._dispatch()

    def close(self) -> None:
        """Stop taking decodes; those running finish on their threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)
