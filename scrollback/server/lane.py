"""`Lane`: short blocking calls on one thread of their own, overflowing when it is held up.

Used for the history service's window reads and for ReadMedia's open-and-verify
(the blocking step before an image's first byte). A window's blocking part
(open, checks, index rows, cached entries, sub-agent links) is ~1 ms of Python
with dozens of syscalls, each of which releases the GIL. Run on asyncio's
default executor, 16 concurrent windows occupy its several threads at once,
which then take the GIL from each other and from the event loop at every
syscall: under 16 clients that contention cost about as much CPU as the
windows' own work. On one thread they run one after another (the GIL would
serialize their Python anyway), and only that thread and the loop share the
GIL: the same run measured 2.2 ms of server CPU per window instead of 2.9 ms,
and 1.3x the windows/s (2 threads gained about half of that); ReadMedia of
1.3 MB images, 2.1 instead of 2.4 ms per MB.

One thread must not let one slow call (a page token's first use building a
file's line index, a byte scan of a file never indexed, a hintless media ref's
search, a cold disk) hold up every other: when the call running on the lane has
run longer than `stuck_after` (20 ms, some twenty fast calls), new calls go to
the default executor instead, as they did before, until it ends. A call thus
waits on the lane only behind those queued while the running one was still
young.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# How long the lane's running call may run before new calls overflow (seconds).
STUCK_AFTER_SECONDS = 0.02


class Lane:
    """One worker thread for short blocking calls; the default executor while it is held up."""

    def __init__(self, stuck_after: float = STUCK_AFTER_SECONDS, name: str = "lane") -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._stuck_after = stuck_after
        # When the call running on the lane started (time.monotonic), None when idle.
        # Written by the lane's thread, read by the loop: one attribute, atomic under the GIL.
        self._started: float | None = None
        # Calls that overflowed to the default executor (for tests and benchmarks).
        self.overflows = 0

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` on the lane (or, if the lane is held up, on the default executor)."""
        started = self._started
        if started is not None and time.monotonic() - started > self._stuck_after:
            self.overflows += 1
            return await asyncio.to_thread(work)
        context = contextvars.copy_context()

        def call() -> T:
            self._started = time.monotonic()
            try:
                return context.run(work)
            finally:
                self._started = None

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """No new calls; queued ones are dropped, a running one finishes on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
