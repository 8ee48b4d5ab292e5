"""The stall guard, the last interceptor: sends a response stream's messages with bounded writes.

Each streamed message is sent with `context.write` (grpc.aio's reader/writer
form), so that each send can be bounded in time: a client that grants no
flow-control window for `stall_timeout` seconds has its stream ended
(DEADLINE_EXCEEDED with reason STREAM_STALLED, one warning log line), its
producer closed at once. One timer per stream watches its writes after the
first (`_StallWatch`): a message costs no task, future or timer of its own.
A stream that ends for any reason closes its producer, so a cancelled or
failed one frees what it held at once, and what it freed goes back to the OS
(scrollback.server.memory `trim_soon`). For the byte-counted methods
(ReadMedia) it adds up the `data` bytes sent, for the metrics at the end.

It wraps response streams only, and turns each into a coroutine handler: the
interceptors before it in the chain see every kind of handler as one
coroutine to await.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, NoReturn

from scrollback.contract.reasons import Reason
from scrollback.server import memory, metrics
from scrollback.server.interceptors.call import (
    Context,
    Interceptor,
    Route,
    RpcCall,
    behavior_of,
    current_call,
    rewrap,
)
from scrollback.server.service_config import DEFAULT_STALL_TIMEOUT_SECONDS
from scrollback.server.status import abort_with_reason

log = logging.getLogger(__name__)


class StreamGuard(Interceptor):
    """Bounds each send of a response stream in time, and frees a stream's data when it ends."""

    def __init__(
        self,
        service: str,
        *,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT_SECONDS,
        byte_counted_methods: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self._service = service
        self._stall_timeout = stall_timeout
        self._byte_counted = byte_counted_methods

    def wrap(self, handler: Any, route: Route) -> Any:
        if not handler.response_streaming:
            return handler
        produce = behavior_of(handler)
        counted = route.name in self._byte_counted

        async def guarded(request: Any, context: Context) -> None:
            call = current_call()
            result: Any = None
            try:
                result = produce(request, context)
                if hasattr(result, "__aiter__"):
                    await self._send_all(call, context, result, counted)
                else:
                    await result
            finally:
                if result is not None and hasattr(result, "aclose"):
                    # A cancelled or failed stream frees what it held at once.
                    await result.aclose()
                result = None
                # ...and what it freed goes back to the OS, not to the heap arenas.
                memory.trim_soon()

        return rewrap(handler, guarded)

    async def _send_all(self, call: RpcCall, context: Context, result: Any, counted: bool) -> None:
        """Send every message of `result`, each write bounded by the stall timeout."""
        # Bytes sent, added to the record once at the end (an update per message costs
        # more than the rest of the loop).
        sent = 0
        watch: _StallWatch | None = None
        try:
            async for message in result:
                if counted:
                    sent += len(getattr(message, "data", b""))
                if watch is None:
                    # The first write also sends the initial metadata: a write grpc must
                    # see complete (a cancelled one would leave the call unable to send
                    # its status), so it gets its own wait.
                    stalled = await self._send(context, message)
                    if stalled is not None:
                        await self._end_stalled(call, context, result, stalled)
                    watch = _StallWatch(self._stall_timeout)
                else:
                    watch.writing()
                    try:
                        await context.write(message)
                    except asyncio.CancelledError:
                        if not watch.fired:
                            raise  # the client left, or the server is stopping
                        watch.handled()
                        await self._end_stalled(call, context, result)
                    watch.written()
                del message  # hold nothing between sends
        finally:
            call.sent_bytes += sent
            if watch is not None:
                watch.close()

    async def _send(self, context: Context, message: Any) -> asyncio.Future[None] | None:
        """Send one message; its still pending write if the client granted no window in time.

        The write of a stalled stream stays pending (grpc.aio cannot take back
        a message handed to the transport, nor send a status beside it):
        `_end_stalled` waits for it. Only a stream's first message goes this
        way (it carries the initial metadata); later ones are watched by the
        stream's `_StallWatch`.
        """
        write = asyncio.ensure_future(context.write(message))
        try:
            done, _ = await asyncio.wait({write}, timeout=self._stall_timeout)
        except BaseException:
            write.cancel()
            raise
        if done:
            write.result()  # raises what the write raised
            return None
        return write

    async def _end_stalled(
        self,
        call: RpcCall,
        context: Context,
        result: Any,
        write: asyncio.Future[None] | None = None,
    ) -> NoReturn:
        """End a stream whose client stopped reading: free its data, log, then its status.

        The producer is closed now, so nothing but the one message handed to
        the transport is held; the status follows that message as soon as the
        transport can send it (the client reads again), or the call is
        cancelled when the client leaves. `write` is the first message's
        pending write, waited for before the status.
        """
        metrics.LIMIT_REFUSALS.labels("stall_timeout").inc()
        log.warning(
            "stream stalled: service=%s method=%s principal=%s granted no flow-control window"
            " for %g s; ending it (stall_timeout_seconds)",
            self._service,
            call.method,
            call.principal.name if call.principal else "-",
            self._stall_timeout,
        )
        await result.aclose()
        if write is not None:
            with contextlib.suppress(Exception):
                await write
        await abort_with_reason(
            context,
            Reason.STREAM_STALLED,
            f"the client granted no flow-control window for {self._stall_timeout:g} s"
            " (stall_timeout_seconds)",
        )


class _StallWatch:
    """The stall timeout of one stream: one timer for the whole stream, not one per message.

    `writing()` / `written()` bracket each `context.write`. The timer fires
    at most once per timeout: if a write has then been pending for the whole
    timeout, the client granted no flow-control window that long, and the
    stream's task is cancelled out of that write (`fired` tells this cancel
    from the client leaving); otherwise it is set again for the timeout
    after the pending write began, or after now. A write costs one clock
    read, no task, future or timer of its own.
    """

    __slots__ = ("_loop", "_since", "_task", "_timeout", "_timer", "fired")

    def __init__(self, timeout: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._timeout = timeout
        self._since: float | None = None
        self.fired = False
        self._timer = self._loop.call_later(timeout, self._check)

    def writing(self) -> None:
        """A write begins."""
        self._since = self._loop.time()

    def written(self) -> None:
        """The write completed."""
        self._since = None

    def _check(self) -> None:
        since = self._since
        now = self._loop.time()
        if since is not None and now - since >= self._timeout:
            if self._task is not None:
                self.fired = True
                # Out of the pending write, which grpc leaves with the transport.
                self._task.cancel()
            return
        self._timer = self._loop.call_at(
            (now if since is None else since) + self._timeout, self._check
        )

    def handled(self) -> None:
        """The stream caught the cancel this watch made: it is no longer pending."""
        if self._task is not None:
            self._task.uncancel()

    def close(self) -> None:
        """The stream ended: no more checks."""
        self._timer.cancel()
