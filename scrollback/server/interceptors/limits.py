"""The limits interceptor: at most `max_streams` calls in flight per principal.

Over the limit is RESOURCE_EXHAUSTED with reason TOO_MANY_STREAMS, naming
the setting. Anonymous callers share one budget, and all `Health.Watch`
streams another. Served by several worker processes
(scrollback.server.workers), the count is the whole service's
(scrollback.server.stream_limits), and every call it admits or refuses carries
the serving worker's pid in its trailing metadata (`scrollback-worker-pid`),
so operators and tests can see where it ran.
"""

from __future__ import annotations

from collections import Counter as Tally
from typing import Any

from scrollback.contract.reasons import Reason
from scrollback.server import metrics
from scrollback.server.interceptors.call import (
    Context,
    Interceptor,
    Route,
    behavior_of,
    current_call,
    rewrap,
)
from scrollback.server.status import abort_with_reason
from scrollback.server.stream_limits import SharedStreamCounter

WORKER_PID_KEY = "scrollback-worker-pid"


class CallLimits(Interceptor):
    """Counts each principal's calls in flight and refuses those over its budget."""

    def __init__(
        self,
        max_streams: int,
        *,
        shared: SharedStreamCounter | None = None,
        worker_pid: int | None = None,
    ) -> None:
        super().__init__()
        self._max_streams = max_streams
        # Across worker processes: the service-wide count (None: this process only).
        self._shared = shared
        # One of several workers: each call names the worker that served it.
        self._worker_pid = ((WORKER_PID_KEY, str(worker_pid)),) if worker_pid else None
        self._active: Tally[str] = Tally()

    def active_calls(self, principal: str = "") -> int:
        """Calls in flight for a principal ("" = anonymous)."""
        if self._shared is not None:
            return self._shared.total(principal)
        return self._active[principal]

    def _acquire(self, key: str) -> bool:
        if self._shared is not None:
            admitted = self._shared.acquire(key, self._max_streams)
        else:
            admitted = self._active[key] < self._max_streams
        if admitted:
            self._active[key] += 1
        return admitted

    def _release(self, key: str) -> None:
        if self._shared is not None:
            self._shared.release(key)
        self._active[key] -= 1
        if self._active[key] <= 0:
            del self._active[key]

    def wrap(self, handler: Any, route: Route) -> Any:
        inner = behavior_of(handler)

        async def limited(request: Any, context: Context) -> Any:
            key = current_call().key
            if self._worker_pid is not None:
                context.set_trailing_metadata(self._worker_pid)
            if not self._acquire(key):
                metrics.LIMIT_REFUSALS.labels("max_streams_per_principal").inc()
                await abort_with_reason(
                    context,
                    Reason.TOO_MANY_STREAMS,
                    f"over the limit of {self._max_streams} concurrent calls per principal"
                    " (max_streams_per_principal)",
                )
            try:
                return await inner(request, context)
            finally:
                self._release(key)

        return rewrap(handler, limited)
