"""The gateway's connections over raw sockets: late request headers are closed, open ones capped.

Each test starts both services and a real gateway (uvicorn) with a short
header timeout or a small connection cap, opens a bounded number of raw TCP
connections that send half a request (or nothing), and polls them with a
deadline for what the gateway does.
"""

from __future__ import annotations

import time

import httpx

from gateway.protocol import PRESSURE_IDLE_SECONDS
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


def _events_stream(port: int, source: str = "") -> RawConnection:
    """A raw connection reading the session's live events (a request in progress)."""
    connection = RawConnection(port, source=source)
    connection.send(
        f"GET /api/v1/sessions/{SESSION}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    )
    return connection


def _closed_count(connections: list[RawConnection]) -> int:
    """How many of `connections` the gateway has closed (what arrived is read first)."""
    for connection in connections:
        connection.poll()
    return sum(connection.closed for connection in connections)


def _from(source: str) -> httpx.Client:
    """An HTTP client whose connections come from `source`, another loopback address."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10)


def test_connections_over_the_cap_are_refused_at_once(stack: GatewayStack) -> None:
    photo_session(stack, entries=10, photos=1)
    stack.start_gateway(max_connections=10, header_timeout_seconds=60)
    assert stack.gateway is not None
    port = stack.gateway.port
    # Ten requests in progress (event streams): nothing idle to close, the cap is full.
    held = [_events_stream(port) for _ in range(10)]
    extra: list[RawConnection] = []
    try:
        assert poll_until(held, lambda c: b"event: heartbeat" in c.received, 10)
        extra = [RawConnection(port, source="127.0.0.2") for _ in range(20)]
        for connection in extra:
            connection.send(HALF_REQUEST)
        assert poll_until(extra, lambda c: c.closed, 10)
        for connection in extra:
            assert connection.received.startswith(b"HTTP/1.1 503"), connection.received[:40]
            assert b"too many connections are open\n" in connection.received
        # The refused ones leave the server's count as their close is processed.
        assert wait_until(lambda: _open_connections(stack) == 10, 10)
        assert not any(c.closed for c in held)
        with _from("127.0.0.2") as client:
            refused = client.get(f"{stack.url}/api/v1/sessions")
            assert refused.status_code == 503
        for connection in held:
            connection.close()
        assert wait_until(lambda: httpx.get(f"{stack.url}/api/v1/sessions").status_code == 200, 10)
    finally:
        for connection in held + extra:
            connection.close()


def test_one_address_holds_at_most_its_share_of_connections(stack: GatewayStack) -> None:
    stack.start_gateway(max_connections=40, max_connections_per_client=8, header_timeout_seconds=60)
    assert stack.gateway is not None
    port = stack.gateway.port
    hog = [RawConnection(port) for _ in range(20)]
    try:
        for connection in hog:
            connection.send(HALF_REQUEST)
        assert wait_until(lambda: _closed_count(hog) == 12, 10)
        refused = [c for c in hog if c.closed]
        for connection in refused:
            assert connection.received.startswith(b"HTTP/1.1 503"), connection.received[:40]
            assert b"from your address" in connection.received
        assert wait_until(lambda: _open_connections(stack) == 8, 10)
        # Another address is served at once; the hog's own next connection is not.
        with _from("127.0.0.2") as other:
            assert other.get(f"{stack.url}/api/v1/sessions").status_code == 200
        assert httpx.get(f"{stack.url}/api/v1/sessions").status_code == 503
    finally:
        for connection in hog:
            connection.close()
    assert wait_until(lambda: httpx.get(f"{stack.url}/api/v1/sessions").status_code == 200, 10)


def test_idle_connections_make_room_when_the_cap_is_near(stack: GatewayStack) -> None:
    photo_session(stack, entries=10, photos=1)
    stack.start_gateway(max_connections=20, header_timeout_seconds=60)
    assert stack.gateway is not None
    port = stack.gateway.port
    busy = _events_stream(port, source="127.0.0.3")
    idle: list[RawConnection] = []
    try:
        assert poll_until([busy], lambda c: b"event: heartbeat" in c.received, 10)
        # Idle connections from many addresses fill the cap: none of them ever sends a request.
        idle = [RawConnection(port, source=f"127.0.1.{n % 5 + 1}") for n in range(19)]
        idle[0].send(HALF_REQUEST)
        assert wait_until(lambda: _open_connections(stack) == 20, 10)
        # Each new connection closes those idle past a short grace: the newcomer comes once
        # all of them are past it (else it may close only some, enough for itself).
        opened = time.monotonic()
        assert wait_until(lambda: time.monotonic() - opened > PRESSURE_IDLE_SECONDS, 10)
        with _from("127.0.0.2") as newcomer:
            assert wait_until(
                lambda: newcomer.get(f"{stack.url}/api/v1/sessions").status_code == 200, 10
            )
        assert poll_until(idle, lambda c: c.closed, 10)
        # The request in progress was left alone: its events keep coming.
        busy.received = b""
        assert poll_until([busy], lambda c: b"event: heartbeat" in c.received, 10)
        assert not busy.closed
    finally:
        for connection in [busy, *idle]:
            connection.close()
