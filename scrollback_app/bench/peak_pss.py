"""The peak of a process tree's summed PSS while something runs, sampled from /proc.

The kernel keeps a peak of RSS (VmHWM) per process but none of PSS, and a sum
of per-process peaks overstates a tree's peak; `PeakPss` reads the tree's
summed PSS (`idle.tree_pss_kib`) every `interval` seconds on a thread of its
own while the work runs, and keeps the largest reading.
"""

from __future__ import annotations

import threading
from types import TracebackType

from scrollback_app.bench.idle import tree_pss_kib

# Often enough to see a decode's frame held for a fraction of a second.
DEFAULT_INTERVAL_SECONDS = 0.005


class PeakPss:
    """`with PeakPss(pid) as peak:` ... then `peak.kib`: the largest summed PSS seen."""

    def __init__(self, pid: int, interval: float = DEFAULT_INTERVAL_SECONDS) -> None:
        self._pid = pid
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-pss", daemon=True)
        self.kib = 0
        self.samples = 0

    def _sample(self) -> None:
        while True:
            total, _count = tree_pss_kib(self._pid)
            self.kib = max(self.kib, total)
            self.samples += 1
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> PeakPss:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        # One last reading: whatever the work left held counts too.
        self.kib = max(self.kib, tree_pss_kib(self._pid)[0])
