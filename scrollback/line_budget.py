"""The process's budget for long transcript lines held at once (scrollback.linefile reads under it)."""

from __future__ import annotations

import threading

from scrollback.contract.limits import DEFAULT_MAX_LINE_SIZE


class LineMemoryBudget:
    """Bounds the bytes of long lines held at once by all reads of the process.

    Every window and watch reads in worker threads; without a bound, N
    concurrent reads of 10 MB image lines hold N of them. A reader takes the
    line's size from the budget before reading it and gives it back once the
    line is served, waiting while others hold it; a line larger than the whole
    budget waits until it can hold the budget alone. Short lines (at most a
    block) do not take from it.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._held = 0
        self._changed = threading.Condition()

    def share(self, size: int) -> int:
        """What `acquire(size)` takes (`size`, cut to the budget)."""
        return min(size, self.budget_bytes)

    def acquire(self, size: int) -> int:
        """Take `size` bytes (cut to the budget); return what was taken."""
        size = self.share(size)
        with self._changed:
            self._changed.wait_for(lambda: self._held + size <= self.budget_bytes)
            self._held += size
        return size

    def release(self, size: int) -> None:
        """Give back what `acquire` took."""
        with self._changed:
            self._held -= size
            self._changed.notify_all()


# Internal, not a setting: room for one line of the largest size a window serves at a time.
LINE_BUDGET = LineMemoryBudget(DEFAULT_MAX_LINE_SIZE)
