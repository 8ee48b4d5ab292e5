"""The first interceptor of the chain: one log line and the metrics of every RPC.

One structured line per RPC on the `scrollback.rpc` logger (service, method,
code, duration, principal, and the delegate it came through; never payloads
or tokens), and the Prometheus counters and latency histogram of
scrollback.server.metrics. It comes first so that it sees every end, a refusal
by the interceptors after it included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc

from scrollback.server import metrics
from scrollback.server.interceptors.call import (
    Context,
    Interceptor,
    Route,
    RpcCall,
    behavior_of,
    current_call,
    rewrap,
)

rpc_log = logging.getLogger("scrollback.rpc")


def _outcome_of(error: BaseException) -> grpc.StatusCode | None:
    """The status an RPC ended with because of `error` (None: read it from the context)."""
    if isinstance(error, grpc.aio.AbortError):
        return None
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


def _status_code(context: Context) -> grpc.StatusCode:
    code = context.code() or grpc.StatusCode.OK
    if isinstance(code, int):  # some versions report the raw integer
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return code


class RpcLog(Interceptor):
    """Logs and counts every RPC when it ends."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def wrap(self, handler: Any, route: Route) -> Any:
        inner = behavior_of(handler)
        finish = self._finish

        async def logged(request: Any, context: Context) -> Any:
            call = current_call()
            call.started = time.perf_counter()
            try:
                return await inner(request, context)
            except BaseException as error:
                # Only the outcome is kept: keeping the exception would make a cycle
                # (its traceback holds the stream's frames) that keeps what they held
                # until the cyclic GC ran.
                call.outcome = _outcome_of(error)
                raise
            finally:
                finish(call, context)

        return rewrap(handler, logged)

    def _finish(self, call: RpcCall, context: Context) -> None:
        code = call.outcome or _status_code(context)
        duration = time.perf_counter() - call.started
        if call.sent_bytes:
            metrics.READ_MEDIA_BYTES.inc(call.sent_bytes)
        metrics.RPC_REQUESTS.labels(self._service, call.method, code.name).inc()
        metrics.RPC_LATENCY.labels(self._service, call.method).observe(duration)
        rpc_log.info(
            "rpc service=%s method=%s code=%s duration_ms=%.1f principal=%s%s",
            self._service,
            call.method,
            code.name,
            duration * 1000,
            call.principal.name if call.principal else "-",
            f" via={call.via}" if call.via else "",
        )
