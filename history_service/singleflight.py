"""Single-flight: identical concurrent computations share one run; failures are never cached."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Hashable
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
