"""The gateway's HTTP/1.1 connections: uvicorn's httptools protocol with a header timeout and caps.

uvicorn bounds the idle time between requests (`timeout_keep_alive`) but has
no limit on how long a request's headers may take, and its
`limit_concurrency` answers 503 only once a request's headers are complete,
so a client that opens connections and sends half a request line holds one
file descriptor each for as long as it likes. `guarded_protocol` makes the
protocol class the gateway serves with:

- a header timeout: a connection whose request headers have not all arrived
  `header_timeout` seconds after it opened, or after the first byte of its
  next request, is answered 408 and closed. One timer per connection, armed
  only while headers are awaited, so a long response (a photo, an event
  stream) is never cut by it;
- a connection cap per client address: a connection from an address that has
  `max_connections_per_client` open already is answered 503 and closed at once
  (the peers of `trusted_proxies` carry many clients and are not capped so);
- a global connection cap: once 3/4 of `max_connections` are open, each new
  connection first closes the connections that have been without a request in
  progress for `PRESSURE_IDLE_SECONDS` (never opened one, or finished their
  last), so idle connections cannot keep others out; one accepted while
  `max_connections` are still open after that is answered 503 and closed at
  once, before it is read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

log = logging.getLogger("scrollback.gateway")
WARNING_INTERVAL_SECONDS = 10.0
# Near the cap (this share of max_connections open), a connection without a request
# in progress for this long is closed when another one arrives.
PRESSURE_SHARE = 0.75
PRESSURE_IDLE_SECONDS = 1.0
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 34\r\nconnection: close\r\n\r\nthe request headers came too late\n"
)
TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\ntoo many connections are open\n"
)
TOO_MANY_FROM_CLIENT = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 48\r\nconnection: close\r\n\r\ntoo many connections are open from your address\n"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection, closed when its request headers are late or it is one too many."""

    header_timeout: float = 30.0
    max_connections: int = 512
    max_connections_per_client: int = 64
    trusted_proxies: tuple[Network, ...] = ()
    # Per gateway (guarded_protocol makes one class each): connections open per client
    # address, refusals since the last warning and when it was logged.
    open_per_client: Counter[str]
    refused: int = 0
    last_warning: float = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        # The client address this connection is counted under ("" while not counted).
        self._counted = ""
        self._idle_since = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        address = self.client[0] if self.client else ""
        per_client = type(self).open_per_client
        if (
            address
            and per_client[address] >= self.max_connections_per_client
            and not self._is_trusted_proxy(address)
        ):
            self._refuse(TOO_MANY_FROM_CLIENT, "max_connections_per_client")
            return
        open_now = len(self.connections)
        if open_now >= PRESSURE_SHARE * self.max_connections:
            self._close_idle()
            # Those closing are on their way out (their connection_lost runs later).
            open_now = sum(not other.transport.is_closing() for other in self.connections)
        if open_now > self.max_connections:
            self._refuse(TOO_MANY_CONNECTIONS, "max_connections")
            return
        if address:
            per_client[address] += 1
            self._counted = address
        self._await_headers()

    def _is_trusted_proxy(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted_proxies)

    @property
    def request_less(self) -> bool:
        """True while no request is in progress (none yet, or the last one answered)."""
        return (self.cycle is None or self.cycle.response_complete) and not self.pipeline

    def _close_idle(self) -> None:
        """Close the others that have been without a request for a while."""
        cutoff = self.loop.time() - PRESSURE_IDLE_SECONDS
        for other in list(self.connections):
            if (
                other is not self
                and isinstance(other, GuardedHttpProtocol)
                and other.request_less
                and other._idle_since <= cutoff
                and not other.transport.is_closing()
            ):
                other.transport.close()

    def _refuse(self, answer: bytes, bound: str) -> None:
        self._warn_refused(bound)
        self.transport.write(answer)
        self.transport.close()

    def _warn_refused(self, bound: str) -> None:
        # One line per interval, not one per connection of a flood.
        cls = type(self)
        now = self.loop.time()
        cls.refused += 1
        if now - cls.last_warning >= WARNING_INTERVAL_SECONDS:
            log.warning(
                "gateway: %d connections are open; refused %d more (%s)",
                len(self.connections) - 1,
                cls.refused,
                bound,
            )
            cls.last_warning, cls.refused = now, 0

    def _await_headers(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _headers_arrived(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        # A response in progress (a pipelined request's) has its status line out already.
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._await_headers()

    def on_headers_complete(self) -> None:
        self._headers_arrived()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._idle_since = self.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        if self._counted:
            per_client = type(self).open_per_client
            per_client[self._counted] -= 1
            if per_client[self._counted] <= 0:
                del per_client[self._counted]
            self._counted = ""
        super().connection_lost(exc)


def guarded_protocol(config: GatewayConfig) -> type[GuardedHttpProtocol]:
    """The protocol class of one gateway's settings (uvicorn builds one instance per connection)."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {
            "header_timeout": config.header_timeout_seconds,
            "max_connections": config.max_connections,
            "max_connections_per_client": min(
                config.max_connections_per_client, config.max_connections
            ),
            "trusted_proxies": config.trusted_proxy_networks(),
            "open_per_client": Counter(),
        },
    )
