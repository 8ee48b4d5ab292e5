"""What the chained interceptors share: each RPC's record, and the base they are built on.

grpc.aio runs a server's interceptors as a chain: the first of the list calls
the next through `continuation`, the last reaches the servicer's handler, and
each may return that handler wrapped. State passes down the chain in a
context variable (grpc gives every RPC a fresh context, the same for the
interceptors and the handler): here one `RpcCall` per RPC, made by the
interceptor that sees the found handler first, that the others fill in (who
calls, how much was sent) and read (the log line at the end).

`Interceptor` wraps each method's handler once and hands the same wrapped
handler to every later call (the wrapping depends on the method, never on the
call); per-call facts go in the record, read in `begin`. Health checks and
reflection pass through unwrapped; `Health.Watch` is wrapped, without auth,
and all its streams share one budget.
"""

from __future__ import annotations

import contextvars
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from scrollback.principals import Principal

if TYPE_CHECKING:
    from scrollback.contract.reasons import Reason

    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _InterceptorBase = grpc.aio.ServerInterceptor

Context = grpc.aio.ServicerContext[Any, Any]
# A handler's behaviour once the stream guard has wrapped it: every kind is a coroutine.
Behavior = Callable[[Any, Context], Awaitable[Any]]

EXEMPT_PREFIXES = (
    "/grpc.health.v1.",
    "/grpc.reflection.v1alpha.",
    "/grpc.reflection.v1.",
)
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
# The budget all Health.Watch streams share (no principal can have this name).
HEALTH_WATCH_KEY = "\0health-watch"


@dataclass(frozen=True, slots=True)
class Route:
    """How the chain treats one method."""

    # The name in logs and metrics: the short method name, or "Health.Watch".
    name: str
    # Whose budget of concurrent calls an anonymous call of it takes ("" = the caller's).
    budget: str = ""

    @property
    def anonymous(self) -> bool:
        """Open to all, without auth (Health.Watch)."""
        return bool(self.budget)


def route_of(method: str) -> Route | None:
    """How the chain treats `method` (a full `/package.Service/Method` name); None: untouched."""
    if method == HEALTH_WATCH:
        return Route("Health.Watch", HEALTH_WATCH_KEY)
    if method.startswith(EXEMPT_PREFIXES):
        return None
    return Route(method.rsplit("/", 1)[-1])


@dataclass(slots=True)
class RpcCall:
    """One RPC as the chain sees it, from its first interceptor to its log line."""

    details: grpc.HandlerCallDetails
    method: str
    # Whose budget of concurrent calls it takes ("" = anonymous).
    key: str = ""
    started: float = 0.0
    principal: Principal | None = None
    # The delegate that made the call for `principal` ("" = the principal itself).
    via: str = ""
    # Why auth refuses the call (None: it may proceed).
    refusal: tuple[Reason, str] | None = None
    # The status an exception ended the call with; None: the context's code.
    outcome: grpc.StatusCode | None = None
    # Bytes of media streamed (counted by the stream guard for byte-counted methods).
    sent_bytes: int = 0


_current: contextvars.ContextVar[RpcCall | None] = contextvars.ContextVar(
    "scrollback_rpc_call", default=None
)


def current_call() -> RpcCall:
    """The record of the RPC in progress (inside a wrapped handler)."""
    call = _current.get()
    if call is None:
        raise RuntimeError("no RPC in progress: the handler was not wrapped by the chain")
    return call


def rewrap(handler: Any, behavior: Any, deserializer: Any = None) -> Any:
    """A handler of the same kind as `handler` with another behaviour (and deserializer)."""
    request_deserializer = deserializer or handler.request_deserializer
    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behavior, request_deserializer, serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behavior, request_deserializer, serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behavior, request_deserializer, serializer)
    return grpc.unary_unary_rpc_method_handler(behavior, request_deserializer, serializer)


def behavior_of(handler: Any) -> Behavior:
    """The coroutine function a handler runs (whatever its kind)."""
    if handler.request_streaming:
        found = handler.stream_stream if handler.response_streaming else handler.stream_unary
    else:
        found = handler.unary_stream if handler.response_streaming else handler.unary_unary
    return found  # type: ignore[no-any-return]


class Interceptor(_InterceptorBase):
    """One job around every RPC handler but health checks and reflection.

    Subclasses implement `wrap` (once per method) and may implement `begin`
    (once per call, with the call's metadata, before any handler runs).
    """

    def __init__(self) -> None:
        # Method -> (the handler found, its wrapping); only methods with a handler get in.
        self._wrapped: dict[str, tuple[Any, Any, Route | None]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is None or known[0] is not handler:
            route = route_of(method)
            wrapped = handler if route is None else self.wrap(handler, route)
            known = (handler, wrapped, route)
            self._wrapped[method] = known
        route = known[2]
        if route is not None:
            call = _current.get()
            # The last interceptor runs this first; the others find its record (the details
            # object is the call's own, so a record of another call is never taken for it).
            if call is None or call.details is not handler_call_details:
                call = RpcCall(handler_call_details, route.name, route.budget)
                _current.set(call)
            self.begin(call, route, handler_call_details)
        return known[1]

    def begin(self, call: RpcCall, route: Route, details: grpc.HandlerCallDetails) -> None:
        """Read what this interceptor needs of one call (its metadata) into its record."""

    @abstractmethod
    def wrap(self, handler: Any, route: Route) -> Any:
        """The handler that does this interceptor's job around `handler`."""
