"""The grpc.aio server interceptor both services share: auth, per-principal limits, logs, metrics.

`ServerPolicy` wraps every RPC handler except health and reflection:

- auth: with a token table, `authorization: Bearer <token>` is required;
  missing or unknown is UNAUTHENTICATED. The caller's principal is set in
  `scrollback.server.auth`'s context variable for the whole call (domain code reads
  it; `asyncio.to_thread` carries it into worker threads). A delegate token
  may name the principal it acts for (`scrollback-on-behalf-of`,
  scrollback.server.auth) in the RPCs its entry lists: the call is then that
  principal's, its projects and its budget; from any other token, in another
  RPC, or for a principal of every project without leave, the header is
  PERMISSION_DENIED with an `ErrorInfo` reason.
- limits: at most `max_streams` calls in flight per principal (anonymous
  callers share one budget); over it is RESOURCE_EXHAUSTED naming the limit.
- stalls: each streamed message is sent with `context.write`; a client that
  grants no flow-control window for `stall_timeout` seconds has its stream
  ended (DEADLINE_EXCEEDED, one warning log line), its producer closed at once.
  One timer per stream watches its writes after the first (`_StallWatch`): a
  message costs no task, future or timer of its own.
- request text: a message that does not deserialize is INVALID_ARGUMENT
  (MALFORMED_REQUEST), and so is one holding U+0000 in any string but a
  message's text (INVALID_ARGUMENT; the rule is scrollback.contract.text's),
  checked once per request message before the servicer sees it.
- `Health.Watch`, open to all, shares one global budget of `max_streams`.
- served by several worker processes (scrollback.server.workers), the count
  is the whole service's (scrollback.server.stream_limits), and every call
  carries the serving worker's pid in its trailing metadata
  (`scrollback-worker-pid`), so operators and tests can see where it ran.
- one structured log line per RPC (`scrollback.rpc`: service, method, code,
  duration, principal; never payloads or tokens) and Prometheus metrics.

`prepare_security` turns `SecuritySettings` into the interceptor, the TLS
credentials and the bind check, and starts the metrics endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter as Tally
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
from google.protobuf.message import Message

from scrollback.contract.reasons import Reason
from scrollback.contract.text import nul_field
from scrollback.principals import Principal
from scrollback.server import memory, metrics
from scrollback.server.auth import ON_BEHALF_OF, SecuritySettings, TokenTable
from scrollback.server.caller import reset_principal, set_principal
from scrollback.server.grpc_support import MalformedRequestError, NulInTextError
from scrollback.server.listening import check_bind_allowed, is_loopback
from scrollback.server.service_config import DEFAULT_STALL_TIMEOUT_SECONDS
from scrollback.server.status import abort_with_reason
from scrollback.server.stream_limits import SharedStreamCounter
from scrollback.server.workers import current_role

log = logging.getLogger(__name__)
rpc_log = logging.getLogger("scrollback.rpc")

EXEMPT_PREFIXES = (
    "/grpc.health.v1.",
    "/grpc.reflection.v1alpha.",
    "/grpc.reflection.v1.",
)
Context = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:
    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _InterceptorBase = grpc.aio.ServerInterceptor
MALFORMED_MESSAGE = "malformed request message"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
# The budget all Health.Watch streams share (no principal can have this name).
HEALTH_WATCH_KEY = "\0health-watch"
WORKER_PID_KEY = "scrollback-worker-pid"


class _Malformed:
    """Stands for a request message that did not deserialize."""


class _NulInText:
    """Stands for a request message with U+0000 where the contract forbids it."""


_MALFORMED = _Malformed()
_NUL_IN_TEXT = _NulInText()


def _safe_deserializer(inner: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """A deserializer that returns _MALFORMED instead of raising (bad wire format, bad UTF-8),
    and _NUL_IN_TEXT for a message the U+0000 rule refuses (scrollback.contract.text)."""
    if inner is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            message = inner(data)
        except Exception:
            return _MALFORMED
        # A string holding U+0000 puts a zero byte on the wire: most messages skip the walk.
        if b"\0" in data and isinstance(message, Message) and nul_field(message) is not None:
            return _NUL_IN_TEXT
        return message

    return deserialize


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if request is _MALFORMED:
            raise MalformedRequestError()
        if request is _NUL_IN_TEXT:
            raise NulInTextError()
        yield request


@dataclass
class _Call:
    method: str
    principal: Principal | None
    failure: str
    started: float
    admitted: bool = False
    # The status an exception ended the call with; None: the context's code.
    outcome: grpc.StatusCode | None = None
    token: Any = None
    # Whose budget of concurrent calls it takes ("" = anonymous).
    key: str = ""
    # Why the call is refused (with `failure`), its status code following from it.
    failure_reason: Reason = Reason.UNAUTHENTICATED
    # The delegate that made the call for `principal` ("" = the principal itself).
    via: str = ""


@dataclass(frozen=True, slots=True)
class _Identity:
    """Who a call's metadata says is calling, or why it is refused."""

    principal: Principal | None
    failure: str = ""
    failure_reason: Reason = Reason.UNAUTHENTICATED
    via: str = ""


def _bearer(metadata: Sequence[Any] | None) -> str | None:
    for item in metadata or ():
        key, value = item[0], item[1]
        if key == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return ""
    return None


def _on_behalf_of(metadata: Sequence[Any] | None) -> list[str]:
    """Every value of the `scrollback-on-behalf-of` metadata."""
    values = []
    for item in metadata or ():
        if item[0] == ON_BEHALF_OF:
            value = item[1]
            values.append(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    return values


class ServerPolicy(_InterceptorBase):
    """Auth, per-principal concurrency, logs and metrics around every RPC."""

    def __init__(
        self,
        service: str,
        tokens: TokenTable | None,
        *,
        max_streams: int,
        byte_counted_methods: frozenset[str] = frozenset(),
        stall_timeout: float = DEFAULT_STALL_TIMEOUT_SECONDS,
        shared: SharedStreamCounter | None = None,
        worker_pid: int | None = None,
    ) -> None:
        self._service = service
        # Across worker processes: the service-wide count (None: this process only).
        self._shared = shared
        # One of several workers: each call names the worker that served it.
        self._worker_pid = ((WORKER_PID_KEY, str(worker_pid)),) if worker_pid else None
        self._tokens = tokens
        self._max_streams = max_streams
        self._stall_timeout = stall_timeout
        self._byte_counted = byte_counted_methods
        self._active: Tally[str] = Tally()

    def active_calls(self, principal: str = "") -> int:
        """Calls in flight for a principal ("" = anonymous)."""
        if self._shared is not None:
            return self._shared.total(principal)
        return self._active[principal]

    def _authenticate(self, method: str, metadata: Sequence[Any] | None) -> _Identity:
        if self._tokens is None:
            return _Identity(None)  # no principals: `scrollback-on-behalf-of` means nothing
        token = _bearer(metadata)
        if token is None:
            return _Identity(None, "missing bearer token")
        found = self._tokens.resolve(token)
        if found is None:
            return _Identity(None, "unknown bearer token")
        principal, delegation = found
        names = _on_behalf_of(metadata)
        if not names:
            return _Identity(principal)
        if delegation is None:
            return _Identity(
                None,
                f"only a delegate token may send {ON_BEHALF_OF}",
                Reason.DELEGATION_NOT_ALLOWED,
            )
        # The method first: a delegate learns no principal's name from an RPC it may not call.
        if not delegation.allows(method):
            return _Identity(
                None,
                f"this delegate token may not call {method} for another principal",
                Reason.DELEGATION_NOT_ALLOWED,
            )
        acting = self._tokens.delegated(names[0]) if len(names) == 1 else None
        if acting is None:
            return _Identity(
                None,
                f"{ON_BEHALF_OF} must name one principal a delegate may act for",
                Reason.UNKNOWN_PRINCIPAL,
            )
        if not delegation.may_act_for(acting):
            return _Identity(
                None,
                "this delegate token may not act for a principal that sees every project",
                Reason.DELEGATION_NOT_ALLOWED,
            )
        return _Identity(acting, via=principal.name)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            return handler
        if method == HEALTH_WATCH:
            # Open to all, but one global budget of streams (and the stall timeout).
            return self._wrap(handler, "Health.Watch", None, anonymous_key=HEALTH_WATCH_KEY)
        if method.startswith(EXEMPT_PREFIXES):
            return handler
        short = method.rsplit("/", 1)[-1]
        metadata = handler_call_details.invocation_metadata
        return self._wrap(handler, short, metadata)

    def _start(self, method: str, metadata: Sequence[Any] | None, anonymous_key: str) -> _Call:
        if anonymous_key:
            return _Call(method, None, "", time.perf_counter(), key=anonymous_key)
        identity = self._authenticate(method, metadata)
        principal = identity.principal
        return _Call(
            method,
            principal,
            identity.failure,
            time.perf_counter(),
            key=principal.name if principal else "",
            failure_reason=identity.failure_reason,
            via=identity.via,
        )

    async def _admit(self, call: _Call, context: Context, request: Any = None) -> None:
        if call.failure:
            await abort_with_reason(context, call.failure_reason, call.failure)
        if request is _MALFORMED:
            await abort_with_reason(context, Reason.MALFORMED_REQUEST, MALFORMED_MESSAGE)
        if request is _NUL_IN_TEXT:
            await abort_with_reason(context, Reason.INVALID_ARGUMENT, str(NulInTextError()))
        key = call.key
        if self._worker_pid is not None:
            context.set_trailing_metadata(self._worker_pid)
        if self._shared is not None:
            admitted = self._shared.acquire(key, self._max_streams)
        else:
            admitted = self._active[key] < self._max_streams
        if not admitted:
            metrics.LIMIT_REFUSALS.labels("max_streams_per_principal").inc()
            await abort_with_reason(
                context,
                Reason.TOO_MANY_STREAMS,
                f"over the limit of {self._max_streams} concurrent calls per principal"
                " (max_streams_per_principal)",
            )
        self._active[key] += 1
        call.admitted = True
        call.token = set_principal(call.principal)

    def _finish(self, call: _Call, context: Context) -> None:
        if call.admitted:
            key = call.key
            if self._shared is not None:
                self._shared.release(key)
            self._active[key] -= 1
            if self._active[key] <= 0:
                del self._active[key]
            reset_principal(call.token)
        code = call.outcome
        if code is None:
            code = context.code() or grpc.StatusCode.OK
            if isinstance(code, int):  # some versions report the raw integer
                code = next(
                    (c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN
                )
        duration = time.perf_counter() - call.started
        name = call.principal.name if call.principal else "-"
        metrics.RPC_REQUESTS.labels(self._service, call.method, code.name).inc()
        metrics.RPC_LATENCY.labels(self._service, call.method).observe(duration)
        rpc_log.info(
            "rpc service=%s method=%s code=%s duration_ms=%.1f principal=%s%s",
            self._service,
            call.method,
            code.name,
            duration * 1000,
            name,
            f" via={call.via}" if call.via else "",
        )

    def _wrap(
        self,
        handler: Any,
        method: str,
        metadata: Sequence[Any] | None,
        *,
        anonymous_key: str = "",
    ) -> Any:
        counted = method in self._byte_counted
        deserializer = _safe_deserializer(handler.request_deserializer)
        if not handler.request_streaming and not handler.response_streaming:
            inner = handler.unary_unary

            async def unary_unary(request: Any, context: Context) -> Any:
                call = self._start(method, metadata, anonymous_key)
                try:
                    await self._admit(call, context, request)
                    return await inner(request, context)
                except BaseException as error:
                    call.outcome = _outcome_of(error)
                    raise
                finally:
                    self._finish(call, context)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, deserializer, handler.response_serializer
            )
        if handler.request_streaming and not handler.response_streaming:
            inner = handler.stream_unary

            async def stream_unary(requests: Any, context: Context) -> Any:
                call = self._start(method, metadata, anonymous_key)
                try:
                    await self._admit(call, context)
                    return await inner(_checked(requests), context)
                except BaseException as error:
                    call.outcome = _outcome_of(error)
                    raise
                finally:
                    self._finish(call, context)

            return grpc.stream_unary_rpc_method_handler(
                stream_unary, deserializer, handler.response_serializer
            )

        streaming_inner = (
            handler.unary_stream if not handler.request_streaming else handler.stream_stream
        )

        # A coroutine handler that sends with `context.write` (grpc.aio's
        # reader/writer form), so that each send can be bounded in time.
        async def streaming(request: Any, context: Context) -> None:
            call = self._start(method, metadata, anonymous_key)
            result: Any = None
            # Bytes sent, counted once at the end (a metric update per message costs
            # more than the rest of the loop).
            sent = 0
            try:
                if handler.request_streaming:
                    await self._admit(call, context)
                    result = streaming_inner(_checked(request), context)
                else:
                    await self._admit(call, context, request)
                    result = streaming_inner(request, context)
                if hasattr(result, "__aiter__"):
                    watch: _StallWatch | None = None
                    try:
                        async for message in result:
                            if counted:
                                sent += len(getattr(message, "data", b""))
                            if watch is None:
                                # The first write also sends the initial metadata: a write
                                # grpc must see complete (a cancelled one would leave the
                                # call unable to send its status), so it gets its own wait.
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
                        if watch is not None:
                            watch.close()
                else:
                    await result
            except BaseException as error:
                # Only the outcome is kept: keeping the exception would make a
                # cycle (its traceback holds this frame, which holds `call`)
                # and keep the stream's generator and all it held until the
                # cyclic GC ran.
                call.outcome = _outcome_of(error)
                raise
            finally:
                if sent:
                    metrics.READ_MEDIA_BYTES.inc(sent)
                if result is not None and hasattr(result, "aclose"):
                    # A cancelled or failed stream frees what it held at once.
                    await result.aclose()
                result = None
                self._finish(call, context)
                # ...and what it freed goes back to the OS, not to the heap arenas.
                memory.trim_soon()

        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(
                streaming, deserializer, handler.response_serializer
            )
        return grpc.unary_stream_rpc_method_handler(
            streaming, deserializer, handler.response_serializer
        )

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
        call: _Call,
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


def _outcome_of(error: BaseException) -> grpc.StatusCode | None:
    """The status an RPC ended with because of `error` (None: read it from the context)."""
    if isinstance(error, grpc.aio.AbortError):
        return None
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


@dataclass
class PreparedSecurity:
    """What a server needs from its security settings."""

    policy: ServerPolicy
    credentials: grpc.ServerCredentials | None
    metrics_port: int | None


def server_credentials(settings: SecuritySettings) -> grpc.ServerCredentials | None:
    """TLS credentials (mutual TLS when a client CA is set), or None for plaintext."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    client_ca = settings.tls_client_ca.read_bytes() if settings.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def prepare_security(
    service: str,
    settings: SecuritySettings,
    *,
    address: str,
    insecure: bool,
    auth_configured: bool = False,
    byte_counted_methods: frozenset[str] = frozenset(),
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_SECONDS,
) -> PreparedSecurity:
    """Validate the settings, check the bind rule, read tokens and certificates, start metrics.

    Raises AuthConfigError or BindRefusedError.
    """
    settings.validate()
    check_bind_allowed(
        address,
        auth_configured=auth_configured or settings.auth_configured,
        insecure=insecure,
    )
    tokens = settings.token_table()
    if tokens is None:
        where = "loopback" if is_loopback(address) else "a non-loopback address (--insecure)"
        log.info("%s service: auth is off (no token file); serving %s", service, where)
    else:
        log.info("%s service: bearer-token auth on, %d principals", service, len(tokens.principals))
    credentials = server_credentials(settings)
    role = current_role()
    policy = ServerPolicy(
        service,
        tokens,
        max_streams=settings.max_streams_per_principal,
        byte_counted_methods=byte_counted_methods,
        stall_timeout=stall_timeout,
        shared=role.stream_counter() if role is not None else None,
        worker_pid=os.getpid() if role is not None else None,
    )
    metrics_port = None
    if settings.metrics_addr:
        metrics_port = metrics.serve_metrics(settings.metrics_addr)
        log.info("%s service: metrics on port %d", service, metrics_port)
    return PreparedSecurity(policy, credentials, metrics_port)
