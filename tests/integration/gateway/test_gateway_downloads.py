"""Signed photo downloads over real servers with auth: whose budget they take, and how many may stay open.

alice sees proj-a, bob proj-b; the gateway's own token is a delegate (and
sees every project by itself). The media service allows 6 calls in flight per
principal. Stalled downloads are raw sockets with a small receive buffer that
read a response's head and never its body (an 8 MB photo), so each holds its
ReadMedia stream open.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.signing import UrlSigner
from tests.support.gateway import (
    TOKENS,
    GatewayStack,
    RawConnection,
    has_whole_response,
    poll_until,
)
from tests.support.security import wait_until
from tests.support.servers import png, user_line

MAX_STREAMS = 6
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HEAD_END = b"\r\n\r\n"


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[GatewayStack]:
    """Both services with auth (alice: proj-a, bob: proj-b) and MAX_STREAMS per principal."""
    stack = GatewayStack(
        tmp_path,
        tenants={"alice": ["proj-a"], "bob": ["proj-b"], "gateway": ["*"]},
        max_streams=MAX_STREAMS,
    )
    try:
        big = PNG_MAGIC + os.urandom(8 << 20)  # sniffs as PNG; larger than every buffer on the way
        stack.pair.transcript("sess-a", "proj-a").write_bytes(
            user_line("a-big", "big", images=(big,))
            + user_line("a-small", "small", images=(png(1),))
        )
        stack.pair.transcript("sess-b", "proj-b").write_bytes(
            user_line("b-small", "small", images=(png(2),))
        )
        yield stack
    finally:
        stack.close()


def _bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def _refs(stack: GatewayStack, session: str, name: str) -> dict[str, dict[str, Any]]:
    window = httpx.get(f"{stack.url}/api/v1/sessions/{session}/window", headers=_bearer(name))
    assert window.status_code == 200, window.text
    return {e["uuid"]: e["mediaRefs"][0] for e in window.json()["entries"]}


def _stall(
    stack: GatewayStack, url: str, count: int, forwarded_for: list[str] | None = None
) -> list[RawConnection]:
    """`count` downloads of `url` that read their response's head and never the body (each
    with its `X-Forwarded-For` address, when given)."""
    assert stack.gateway is not None
    connections = [RawConnection(stack.gateway.port, receive_buffer=4096) for _ in range(count)]
    for number, connection in enumerate(connections):
        extra = f"X-Forwarded-For: {forwarded_for[number]}\r\n" if forwarded_for else ""
        connection.send(f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
    assert poll_until(connections, lambda c: HEAD_END in c.received or c.closed, 15, limit=2048)
    return connections


def _status(connection: RawConnection) -> int:
    return int(connection.received.split(b" ", 2)[1])


def test_a_leaked_url_takes_only_its_principals_budget_and_few_of_it(tenants: GatewayStack) -> None:
    stack = tenants
    stack.start_gateway(auth=True, max_downloads_per_url=4, max_downloads_per_client=100)
    alice = _refs(stack, "sess-a", "alice")
    bob = _refs(stack, "sess-b", "bob")
    assert "p=alice" in alice["a-big"]["url"] and "p=bob" in bob["b-small"]["url"]
    stalled = _stall(stack, alice["a-big"]["url"], 10)
    try:
        statuses = sorted(_status(c) for c in stalled)
        assert statuses == [200] * 4 + [429] * 6, statuses
        refused = [c for c in stalled if _status(c) == 429]
        assert poll_until(refused, has_whole_response, 10, limit=2048)
        for connection in refused:
            assert b"max_downloads_per_url" in connection.received
            assert (
                b"Retry-After: 1" in connection.received or b"retry-after: 1" in connection.received
            )
        # bob's photos do not share alice's budget...
        answer = httpx.get(stack.url + bob["b-small"]["url"])
        assert answer.status_code == 200, answer.text
        assert answer.content == png(2)
        # ...and alice's own photos still load: the leak holds 4 of her 6 streams.
        assert httpx.get(stack.url + alice["a-small"]["url"]).status_code == 200
    finally:
        for connection in stalled:
            connection.close()
    # Their places come back when the downloads end: four may stall again.
    assert wait_until(lambda: _stall_again(stack, alice["a-big"]["url"], 4), 10)


def _stall_again(stack: GatewayStack, url: str, count: int) -> bool:
    """True if `count` new stalled downloads of `url` are all answered 200 (then closed)."""
    connections = _stall(stack, url, count)
    try:
        return all(_status(c) == 200 for c in connections)
    finally:
        for connection in connections:
            connection.close()


def test_one_client_address_has_a_bound_too(tenants: GatewayStack) -> None:
    stack = tenants
    stack.start_gateway(auth=True, max_downloads_per_url=10, max_downloads_per_client=3)
    alice = _refs(stack, "sess-a", "alice")
    bob = _refs(stack, "sess-b", "bob")
    stalled = _stall(stack, alice["a-big"]["url"], 3)
    try:
        assert [_status(c) for c in stalled] == [200] * 3
        refused = httpx.get(stack.url + bob["b-small"]["url"])
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "TOO_MANY_DOWNLOADS"
        assert "max_downloads_per_client" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"
    finally:
        for connection in stalled:
            connection.close()
    assert wait_until(lambda: httpx.get(stack.url + bob["b-small"]["url"]).status_code == 200, 10)


def test_a_signed_url_reads_only_what_its_principal_may_see(tenants: GatewayStack) -> None:
    stack = tenants
    config = stack.start_gateway(auth=True)
    bob = _refs(stack, "sess-b", "bob")["b-small"]
    # A URL for alice of bob's photo, signed with the gateway's own key (as a bug or a
    # stolen key would make one): the read is alice's, so the photo does not exist.
    expires, signature = UrlSigner(config.signing_key(), 3600).sign(bob["uri"], bob["pin"], "alice")
    forged = httpx.get(
        f"{stack.url}/api/v1/media/{bob['uri']}",
        params={"pin": bob["pin"], "p": "alice", "exp": expires, "sig": signature},
    )
    assert forged.status_code == 404
    assert httpx.get(stack.url + bob["url"]).status_code == 200


def test_forwarded_addresses_are_believed_only_from_trusted_proxies(
    tenants: GatewayStack,
) -> None:
    """One loopback client claiming other addresses stays one client; a listed proxy is believed."""
    stack = tenants
    stack.start_gateway(auth=True, max_downloads_per_url=10, max_downloads_per_client=3)
    url = _refs(stack, "sess-a", "alice")["a-big"]["url"]
    spoofed = [f"203.0.113.{n}" for n in range(1, 6)]
    stalled = _stall(stack, url, 5, spoofed)
    try:
        assert sorted(_status(c) for c in stalled) == [200] * 3 + [429] * 2
    finally:
        for connection in stalled:
            connection.close()
    assert stack.gateway is not None
    stack.pair.run(stack.gateway.stop())
    stack.gateway = None
    stack.start_gateway(
        auth=True,
        max_downloads_per_url=10,
        max_downloads_per_client=3,
        trusted_proxies="127.0.0.0/8, ::1",
    )
    url = _refs(stack, "sess-a", "alice")["a-big"]["url"]
    behind_proxy = _stall(stack, url, 5, spoofed)
    try:
        # Each forwarded client has its own bound: five clients, one download each.
        assert [_status(c) for c in behind_proxy] == [200] * 5
    finally:
        for connection in behind_proxy:
            connection.close()
