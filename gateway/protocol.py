"""The gateway's HTTP/1.1 connections: uvicorn's httptools protocol with a header timeout and a cap.

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
- a connection cap: a connection accepted while `max_connections` are
  already open is answered 503 and closed at once, before it is read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("scrollback.gateway")
WARNING_INTERVAL_SECONDS = 10.0

REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 34\r\nconnection: close\r\n\r\nthe request headers came too late\n"
)
TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\ntoo many connections are open\n"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection, closed when its request headers are late or it is one too many."""

    header_timeout: float = 30.0
    max_connections: int = 512
    # Refusals since the last warning, and when it was logged (per gateway's class).
    refused: int = 0
    last_warning: float = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._warn_refused()
            self.transport.write(TOO_MANY_CONNECTIONS)
            self.transport.close()
            return
        self._await_headers()

    def _warn_refused(self) -> None:
        # One line per interval, not one per connection of a flood.
        cls = type(self)
        now = self.loop.time()
        cls.refused += 1
        if now - cls.last_warning >= WARNING_INTERVAL_SECONDS:
            log.warning(
                "gateway: %d connections are open; refused %d more (max_connections)",
                self.max_connections,
                cls.refused,
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

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)


def guarded_protocol(header_timeout: float, max_connections: int) -> type[GuardedHttpProtocol]:
    """The protocol class of one gateway's settings (uvicorn builds one instance per connection)."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {"header_timeout": header_timeout, "max_connections": max_connections},
    )
