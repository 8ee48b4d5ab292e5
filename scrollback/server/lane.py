"""`Lane`: short blocking calls on one thread of their own, overflowing when it is held up.

Used for the history service's window reads and for ReadMedia's open-and-verify
(the blocking step before an image's first byte). Such a call is a little
Python with dozens of syscalls, each of which releases the GIL. On asyncio's
default executor, concurrent calls occupy several threads at once, which then
take the GIL from each other and from the event loop at every syscall; on one
thread they run one after another (the GIL would serialize their Python anyway)
and only that thread and the loop share the GIL. docs/benchmarks.md
has what that saves.

One thread must not let one slow call (a page token's first use building a
file's line index, a byte scan of a file never indexed, a hintless media ref's
search, a cold disk) hold up every other: when the call running on the lane has
run longer than `stuck_after` (20 ms, some twenty fast calls), new calls go to
the default executor instead until it ends. A call thus
waits on the lane only behind those queued while the running one was still
young. Nor may many fast calls (one caller's flood) make the queue long: with
`max_queued` (16) calls on the lane, new ones overflow the same way.

`run_shared(key, work)` also shares work: a call whose key matches a call still
queued on the lane (not yet started) waits for that call's result instead of
queuing its own; one that has started is never joined, so every answer is read
after its caller asked. (Identical concurrent windows on one thread would
otherwise each run in turn.)
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# How long the lane's running call may run before new calls overflow (seconds).
_STUCK_AFTER_SECONDS = 0.02
# How many calls may wait on the lane (queued or running) before new ones overflow:
# whoever fills the queue (one principal's many fast windows, say), a call waits
# behind at most this many, some 30 ms of fast calls.
MAX_QUEUED = 16


class Lane:
    """One worker thread for short blocking calls; the default executor while it is held up."""

    def __init__(
        self,
        stuck_after: float = _STUCK_AFTER_SECONDS,
        name: str = "lane",
        max_queued: int = MAX_QUEUED,
    ) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._stuck_after = stuck_after
        self._max_queued = max_queued
        # Calls on the lane, queued or running (only the loop's thread changes it).
        self._queued_calls = 0
        # When the call running on the lane started (time.monotonic), None when idle.
        # Written by the lane's thread, read by the loop: one attribute, atomic under the GIL.
        self._started: float | None = None
        # Calls that overflowed to the default executor, and that joined a queued one
        # (for tests and benchmarks).
        self.overflows = 0
        self.joined = 0
        # run_shared calls queued and not started yet, by key (the lock: loop and lane thread).
        self._queued: dict[Hashable, asyncio.Future[Any]] = {}
        self._queued_lock = threading.Lock()

    @property
    def queued_calls(self) -> int:
        """Calls on the lane now, queued or running."""
        return self._queued_calls

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` on the lane (or, if the lane is held up, on the default executor)."""
        started = self._started
        if self._queued_calls >= self._max_queued or (
            started is not None and time.monotonic() - started > self._stuck_after
        ):
            self.overflows += 1
            return await asyncio.to_thread(work)
        context = contextvars.copy_context()

        def call() -> T:
            self._started = time.monotonic()
            try:
                return context.run(work)
            finally:
                self._started = None

        self._queued_calls += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        finally:
            self._queued_calls -= 1

    async def run_shared(self, key: Hashable, work: Callable[[], T]) -> T:
        """`run(work)`, or the result of a call with the same key still queued (not started)."""
        with self._queued_lock:
            queued = self._queued.get(key)
            if queued is not None:
                self.joined += 1
        if queued is not None:
            result: T = await asyncio.shield(queued)
            return result

        def started() -> T:
            self._forget(key, flight)  # from now on, later callers queue their own
            return work()

        flight: asyncio.Future[T] = asyncio.ensure_future(self.run(started))
        with self._queued_lock:
            self._queued[key] = flight
        # Forgotten also if it never started; its error is retrieved even if no caller waits.
        flight.add_done_callback(lambda done: self._forget(key, done))
        flight.add_done_callback(_retrieve)
        return await asyncio.shield(flight)

    def _forget(self, key: Hashable, flight: asyncio.Future[Any]) -> None:
        with self._queued_lock:
            if self._queued.get(key) is flight:
                del self._queued[key]

    def close(self) -> None:
        """No new calls; queued ones are dropped, a running one finishes on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def _retrieve(flight: asyncio.Future[Any]) -> None:
    if not flight.cancelled():
        flight.exception()
