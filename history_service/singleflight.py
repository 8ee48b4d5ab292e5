"""Single-flight: identical concurrent computations share one run; failures are never cached."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Hashable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Concurrent calls with the same key await one shared run of the first caller's work.

    The run is a task of its own, so a caller that goes away does not cancel
    it for the others. The key is forgotten as soon as the run ends, with a
    result or an error: nothing is cached beyond the callers that overlapped it.
    """

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Task[T]] = {}
        self.runs = 0

    async def do(self, key: Hashable, work: Coroutine[Any, Any, T]) -> tuple[T, bool]:
        """Return (result, shared): shared is True when another caller's run was joined."""
        task = self._flights.get(key)
        shared = task is not None
        if task is None:
            task = asyncio.ensure_future(work)
            self._flights[key] = task
            self.runs += 1
            task.add_done_callback(lambda done: self._landed(key, done))
        else:
            work.close()
        return await asyncio.shield(task), shared

    def _landed(self, key: Hashable, task: asyncio.Task[T]) -> None:
        if self._flights.get(key) is task:
            del self._flights[key]
        if not task.cancelled():
            task.exception()  # retrieved here; every caller re-raises it itself


class ThreadSingleFlight(Generic[T]):
    """SingleFlight for blocking work run in worker threads.

    A window is opened, keyed by its file version and read in one worker
    thread (one hop off the event loop per window, not one per step): a
    thread that finds the same key in flight waits for that run's result (or
    its error) instead of repeating it. Nothing is kept once the run ends.
    """

    def __init__(self) -> None:
        self._flights: dict[Hashable, Future[T]] = {}
        self._lock = threading.Lock()
        self.runs = 0

    def do(self, key: Hashable, work: Callable[[], T]) -> tuple[T, bool]:
        """Return (result, shared): shared is True when another thread's run was joined."""
        with self._lock:
            flight = self._flights.get(key)
            shared = flight is not None
            if flight is None:
                flight = self._flights[key] = Future()
                self.runs += 1
        if shared:
            return flight.result(), True
        try:
            result = work()
        except BaseException as error:
            flight.set_exception(error)
            raise
        else:
            flight.set_result(result)
            return result, False
        finally:
            with self._lock:
                del self._flights[key]
