"""Single-flight: identical concurrent window reads in worker threads share one run; failures are never cached."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")


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
