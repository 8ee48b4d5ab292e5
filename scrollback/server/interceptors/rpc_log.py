"""The first interceptor of the chain: one log line and the metrics of every RPC.

One structured line per RPC on the `scrollback.rpc` logger (service, method,
code, duration, principal, and the delegate it came through; never payloads
or tokens), and the Prometheus counters and latency histogram of
scrollback.server.metrics. It comes first so that it sees every end, a refusal
by the interceptors after it included; it also counts each call in and out
of scrollback.foreground, which background work steps aside for.

The log line is written off the request path: an RPC's end only notes its
fields, and the lines noted are written by one callback the event loop runs
after the calls' ends, as records made directly (the logger's search of the
stack for the caller's file and line, which these lines do not show, is not
paid per call). The counters' labelled children are looked up once per
method and code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc

from scrollback import foreground
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


# Streams that stay open while waiting for something to send (not counted as work in flight).
WAITING_STREAMS = frozenset({"WatchSession", "Health.Watch"})


def _nothing() -> None:
    return None


_LINE = "rpc service=%s method=%s code=%s duration_ms=%.1f principal=%s%s"


class RpcLog(Interceptor):
    """Logs and counts every RPC when it ends."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service
        # The lines of calls that ended, written by `_write_lines` (one scheduled at a time).
        self._lines: list[tuple[object, ...]] = []
        self._requests: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

    def wrap(self, handler: Any, route: Route) -> Any:
        inner = behavior_of(handler)
        finish = self._finish
        # A watch is open for hours and mostly waits: background work need not wait for it.
        if route.name in WAITING_STREAMS:
            started, ended = _nothing, _nothing
        else:
            started, ended = foreground.call_started, foreground.call_ended

        async def logged(request: Any, context: Context) -> Any:
            call = current_call()
            call.started = time.perf_counter()
            started()
            try:
                return await inner(request, context)
            except BaseException as error:
                # Only the outcome is kept: keeping the exception would make a cycle
                # (its traceback holds the stream's frames) that keeps what they held
                # until the cyclic GC ran.
                call.outcome = _outcome_of(error)
                raise
            finally:
                ended()
                finish(call, context)

        return rewrap(handler, logged)

    def _finish(self, call: RpcCall, context: Context) -> None:
        code = call.outcome or _status_code(context)
        duration = time.perf_counter() - call.started
        if call.sent_bytes:
            metrics.READ_MEDIA_BYTES.inc(call.sent_bytes)
        method = call.method
        requests = self._requests.get((method, code.name))
        if requests is None:
            requests = metrics.RPC_REQUESTS.labels(self._service, method, code.name)
            self._requests[(method, code.name)] = requests
        requests.inc()
        latency = self._latency.get(method)
        if latency is None:
            latency = self._latency[method] = metrics.RPC_LATENCY.labels(self._service, method)
        latency.observe(duration)
        if not rpc_log.isEnabledFor(logging.INFO):
            return
        if not self._lines:
            asyncio.get_running_loop().call_soon(self._write_lines)
        self._lines.append(
            (
                self._service,
                method,
                code.name,
                duration * 1000,
                call.principal.name if call.principal else "-",
                f" via={call.via}" if call.via else "",
            )
        )

    def _write_lines(self) -> None:
        """Write the lines noted since the last time, one record each."""
        lines, self._lines = self._lines, []
        for args in lines:
            record = rpc_log.makeRecord(
                rpc_log.name, logging.INFO, __file__, 0, _LINE, args, None, "_finish"
            )
            rpc_log.handle(record)
