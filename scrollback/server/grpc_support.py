"""Server plumbing both services share: health, reflection, binding rules, error mapping.

Each service's `server.py` builds its grpc.aio server through `build_server`,
so both expose `grpc.health.v1.Health` and server reflection (grpcurl `list`
works); the binding rules (a non-loopback address needs auth or `--insecure`,
docs/contract.md §6) are in scrollback.server.listening.

Each servicer class is decorated with `maps_errors(ERROR_TABLE)`: every RPC
method, unary or streaming, then turns a domain exception into its status
through `abort_for`, wherever it is raised (also after a stream's first
message), so no RPC carries its own `try` block for it (docs/contract.md §9).
The table gives each error its reason (which fixes its status code), sent as a
`google.rpc.ErrorInfo` in the status details (`scrollback.server.status`).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from scrollback.contract.reasons import Reason
from scrollback.server.listening import ListenError, probe_listen
from scrollback.server.memory import pin_mmap_threshold
from scrollback.server.serialized import Serialized
from scrollback.server.status import abort_with_reason, status_code
from scrollback.server.worker_role import current_role

log = logging.getLogger(__name__)

# grpc's documented asyncio health servicer; its module is not in the stubs.
AsyncHealthServicer: Any = health.aio.HealthServicer  # type: ignore[attr-defined]

# Every streamed or unary message stays below gRPC's default 4 MiB receive
# limit, so clients with default settings read anything we send.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class MalformedRequestError(ValueError):
    """A request message that does not parse (bad wire format, string fields not UTF-8)."""

    def __init__(self) -> None:
        super().__init__("malformed request message")


class NulInTextError(ValueError):
    """A request string holding U+0000 where the contract forbids it (scrollback.contract.text)."""

    def __init__(self) -> None:
        super().__init__(
            "a request field holds the character U+0000, which only a message's text may hold"
        )


@dataclass
class RunningServer:
    """A started server, the port it bound and its health servicer."""

    server: grpc.aio.Server
    port: int
    health: Any  # AsyncHealthServicer
    service_names: tuple[str, ...]

    async def set_serving(self, serving: bool) -> None:
        """Mark every service (and the overall server) SERVING or NOT_SERVING."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_names):
            await self.health.set(name, status)

    async def stop(self, grace: float = 5.0) -> None:
        """Health goes NOT_SERVING, in-flight calls get `grace` seconds, then stop."""
        await self.set_serving(False)
        await self.server.stop(grace)


async def build_server(
    address: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    *,
    interceptors: Iterable[grpc.aio.ServerInterceptor[Any, Any]] = (),
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    credentials: grpc.ServerCredentials | None = None,
) -> RunningServer:
    """Build, bind and start a grpc.aio server with health and reflection (TLS with credentials)."""
    pin_mmap_threshold()
    # One of several workers (scrollback.server.workers): share the port its
    # parent reserved, and the kernel spreads the connections.
    role = current_role()
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 1 if role is not None else 0),
        ],
    )
    register(server)
    health_servicer = AsyncHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    probe_listen(address, reuse_port=role is not None)
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpc's "Failed to bind to address ...; set GRPC_VERBOSITY=debug"
        raise ListenError(address, "the port is in use or the host is not local") from None
    if port == 0:
        raise ListenError(address, "the port is in use or the host is not local")
    await server.start()
    running = RunningServer(server, port, health_servicer, tuple(service_names))
    await running.set_serving(True)
    if role is not None:
        role.announce_ready()
    return running


ErrorTable = Mapping[type[BaseException], Reason]


def reason_for(error: BaseException, table: ErrorTable) -> Reason | None:
    """The reason the table gives this error (or its nearest base); None when it has none."""
    if isinstance(error, MalformedRequestError):
        return Reason.MALFORMED_REQUEST
    if isinstance(error, NulInTextError):
        return Reason.INVALID_ARGUMENT
    for error_type in type(error).__mro__:
        reason = table.get(error_type)
        if reason is not None:
            return reason
    return None


def error_message(error: BaseException, reason: Reason) -> str:
    """The error's own fixed text, or its status code in words when it has none."""
    return str(error) or status_code(reason).name.lower().replace("_", " ")


async def abort_for(
    context: grpc.aio.ServicerContext[Any, Any], error: BaseException, table: ErrorTable
) -> NoReturn:
    """Abort the call with the mapped reason (and its status) and the error's own message.

    Errors the table does not know are INTERNAL with a fixed message: internals
    never leak. An abort already under way passes through.
    """
    if isinstance(error, grpc.aio.AbortError):
        raise error
    reason = reason_for(error, table)
    if reason is None:
        log.exception("unexpected error", exc_info=error)
        await abort_with_reason(context, Reason.INTERNAL, "internal error")
    await abort_with_reason(context, reason, error_message(error, reason))


ServicerT = TypeVar("ServicerT", bound=type)


def _mapped_unary(method: Callable[..., Any], table: ErrorTable) -> Callable[..., Any]:
    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: Any) -> Any:
        try:
            return await method(self, request, context)
        except Exception as error:
            await abort_for(context, error, table)

    return unary


def _mapped_stream(method: Callable[..., Any], table: ErrorTable) -> Callable[..., Any]:
    @functools.wraps(method)
    async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
        responses = method(self, request, context)
        try:
            async for response in responses:
                yield response
        except Exception as error:
            await abort_for(context, error, table)
        finally:
            # Runs the method's own cleanup now, not when the generator is collected.
            await responses.aclose()

    return stream


def maps_errors(table: ErrorTable) -> Callable[[ServicerT], ServicerT]:
    """A class decorator: every RPC method of the servicer maps its errors through `table`.

    The RPC methods are the servicer's own methods named in CamelCase, as
    generated servicer bases name them; coroutines (unary responses) and async
    generators (streamed responses) alike.
    """

    def decorate(cls: ServicerT) -> ServicerT:
        for name, method in list(vars(cls).items()):
            if not name[:1].isupper():
                continue
            if inspect.isasyncgenfunction(method):
                setattr(cls, name, _mapped_stream(method, table))
            elif inspect.iscoroutinefunction(method):
                setattr(cls, name, _mapped_unary(method, table))
        return cls

    return decorate


class _RecordedHandlers:
    """Stands for the server while generated code registers a servicer: keeps its handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # rebuilt from the method handlers below

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.handlers = dict(handlers)


def _passing_serialized(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def serializer(message: Any) -> bytes:
        return message.wire if isinstance(message, Serialized) else serialize(message)

    return serializer


def add_servicer_sending_serialized(
    register: Callable[[Any, grpc.aio.Server], None],
    servicer: Any,
    server: grpc.aio.Server,
    service: str,
    methods: Iterable[str],
) -> None:
    """Register `servicer` as its generated `register` function does, except that the
    server-streaming `methods` may yield a response already serialized (`Serialized`),
    which grpc sends as it is.

    The wire format is unchanged; it spares grpc a parse and a re-serialization of what
    a service keeps encoded (window entries, decoded image chunks).
    """
    recorder = _RecordedHandlers()
    # The generated function calls only the two methods the recorder has.
    register(servicer, cast(grpc.aio.Server, recorder))
    handlers = recorder.handlers
    for name in methods:
        handler = handlers[name]
        if handler.unary_stream is None or handler.response_serializer is None:
            raise TypeError(f"{service}/{name} is not a server-streaming method")
        handlers[name] = grpc.unary_stream_rpc_method_handler(
            handler.unary_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=_passing_serialized(handler.response_serializer),
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    # grpc.aio.Server has it at runtime (grpcio >= 1.63, its fast path); the stubs predate it.
    server.add_registered_method_handlers(service, handlers)  # type: ignore[attr-defined]
