"""The grpc.aio server interceptors both services share, chained, one job each.

Every RPC but health checks and reflection passes, in this order:

1. `RpcLog` (rpc_log): one structured log line per RPC (`scrollback.rpc`:
   service, method, code, duration, principal; never payloads or tokens) and
   Prometheus metrics; first, so it sees every end, refusals included.
2. `Authenticate` (authenticate): the bearer token's principal for the whole
   call, a delegate's `scrollback-on-behalf-of`, or UNAUTHENTICATED /
   PERMISSION_DENIED.
3. `RequestCheck` (request_check): a request message that does not
   deserialize, or holds U+0000 where the contract forbids it, is
   INVALID_ARGUMENT before the servicer sees it.
4. `CallLimits` (limits): at most `max_streams` calls in flight per
   principal, service-wide across worker processes; RESOURCE_EXHAUSTED over
   it; each call names the worker that served it.
5. `StreamGuard` (stream_guard): response streams are sent with writes
   bounded by the stall timeout; an ended stream frees what it held at once.

`Health.Watch`, open to all, skips auth and shares one global budget of
`max_streams`. The interceptors share each RPC's record (call.py), passed
down the chain in a context variable as grpc.aio's interceptor API provides.

`prepare_security` turns `SecuritySettings` into the chain, the TLS
credentials and the bind check, and starts the metrics endpoint.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import grpc

from scrollback.server import metrics
from scrollback.server.auth import SecuritySettings, TokenTable
from scrollback.server.interceptors.authenticate import Authenticate
from scrollback.server.interceptors.call import Interceptor
from scrollback.server.interceptors.limits import CallLimits
from scrollback.server.interceptors.request_check import RequestCheck
from scrollback.server.interceptors.rpc_log import RpcLog
from scrollback.server.interceptors.stream_guard import StreamGuard
from scrollback.server.listening import check_bind_allowed, is_loopback
from scrollback.server.service_config import DEFAULT_STALL_TIMEOUT_SECONDS
from scrollback.server.worker_role import current_role

log = logging.getLogger(__name__)

__all__ = [
    "CallLimits",
    "PreparedSecurity",
    "prepare_security",
    "server_credentials",
    "server_interceptors",
]


def server_interceptors(
    service: str,
    tokens: TokenTable | None,
    limits: CallLimits,
    *,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_SECONDS,
    byte_counted_methods: frozenset[str] = frozenset(),
) -> list[Interceptor]:
    """The chain, first to last (grpc.aio's `interceptors=` order)."""
    return [
        RpcLog(service),
        Authenticate(tokens),
        RequestCheck(),
        limits,
        StreamGuard(
            service, stall_timeout=stall_timeout, byte_counted_methods=byte_counted_methods
        ),
    ]


@dataclass
class PreparedSecurity:
    """What a server needs from its security settings."""

    interceptors: list[Interceptor]
    # The chain's count of calls in flight.
    limits: CallLimits
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
    limits = CallLimits(
        settings.max_streams_per_principal,
        shared=role.stream_counter() if role is not None else None,
        worker_pid=os.getpid() if role is not None else None,
    )
    interceptors = server_interceptors(
        service,
        tokens,
        limits,
        stall_timeout=stall_timeout,
        byte_counted_methods=byte_counted_methods,
    )
    metrics_port = None
    if settings.metrics_addr:
        metrics_port = metrics.serve_metrics(settings.metrics_addr)
        log.info("%s service: metrics on port %d", service, metrics_port)
    return PreparedSecurity(interceptors, limits, credentials, metrics_port)
