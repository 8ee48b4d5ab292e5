"""The gateway's connections over raw sockets: late request headers are closed, open ones capped.

Each test starts both services and a real gateway (uvicorn) with a short
header timeout or a small connection cap, opens a bounded number of raw TCP
connections that send half a request (or nothing), and polls them with a
deadline for what the gateway does.
"""

from __future__ import annotations

import time

import httpx

from tests.support.gateway import (
    SESSION,
    GatewayStack,
    RawConnection,
    has_whole_response,
    photo_session,
    poll_until,
)
from tests.support.security import wait_until

HALF_REQUEST = b"GET /api/v1/sessions HT"


def _open_connections(stack: GatewayStack) -> int:
    assert stack.gateway is not None
    return len(stack.gateway.server.server_state.connections)


def test_requests_whose_headers_are_late_are_closed(stack: GatewayStack) -> None:
    photo_session(stack, entries=10, photos=1)
    stack.start_gateway(header_timeout_seconds=0.5)
    assert stack.gateway is not None
    port = stack.gateway.port
    half = [RawConnection(port) for _ in range(40)]
    for connection in half:
        connection.send(HALF_REQUEST)
    silent = [RawConnection(port) for _ in range(5)]
    # A keep-alive connection whose second request stops halfway.
    second = RawConnection(port)
    second.send(b"GET /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert poll_until([second], has_whole_response, 10)
    assert second.received.startswith(b"HTTP/1.1 200")
    second.received = b""
    second.send(b"GET /api/v1/sessions HTTP/1.1\r\nHost: 127.0")
    everyone = [*half, *silent, second]
    try:
        assert poll_until(everyone, lambda c: c.closed, 15), (
            f"{sum(not c.closed for c in everyone)} of {len(everyone)} connections still open"
        )
        for connection in everyone:
            assert connection.received.startswith(b"HTTP/1.1 408"), connection.received[:40]
        assert wait_until(lambda: _open_connections(stack) == 0, 5)

        # A request whose headers arrive in time is served; a long response outlives the timeout.
        assert httpx.get(f"{stack.url}/api/v1/sessions").status_code == 200
        started = time.monotonic()
        heartbeats = 0
        with httpx.stream(
            "GET", f"{stack.url}/api/v1/sessions/{SESSION}/events", timeout=10
        ) as events:
            for line in events.iter_lines():
                heartbeats += line.startswith("event: heartbeat")
                if time.monotonic() - started > 2.0 and heartbeats >= 2:
                    break
        assert heartbeats >= 2
    finally:
        for connection in everyone:
            connection.close()


def test_connections_over_the_cap_are_refused_at_once(stack: GatewayStack) -> None:
    stack.start_gateway(max_connections=10, header_timeout_seconds=60)
    assert stack.gateway is not None
    port = stack.gateway.port
    held = [RawConnection(port) for _ in range(10)]
    extra: list[RawConnection] = []
    try:
        for connection in held:
            connection.send(HALF_REQUEST)
        assert wait_until(lambda: _open_connections(stack) == 10, 10)
        extra = [RawConnection(port) for _ in range(20)]
        for connection in extra:
            connection.send(HALF_REQUEST)
        assert poll_until(extra, lambda c: c.closed, 10)
        for connection in extra:
            assert connection.received.startswith(b"HTTP/1.1 503"), connection.received[:40]
        # The refused ones leave the server's count as their close is processed.
        assert wait_until(lambda: _open_connections(stack) == 10, 10)
        assert not any(c.closed for c in held)
        with httpx.Client() as client:
            refused = client.get(f"{stack.url}/api/v1/sessions")
            assert refused.status_code == 503
        for connection in held:
            connection.close()
        assert wait_until(lambda: httpx.get(f"{stack.url}/api/v1/sessions").status_code == 200, 10)
    finally:
        for connection in held + extra:
            connection.close()
