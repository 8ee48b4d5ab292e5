"""Slow downloads hold a bounded part of a photo in the gateway, however large the photo.

The gateway reads from a media server of the test's own (a real grpc.aio
server on 127.0.0.1:0) that streams a 32 MiB photo in 256 KiB chunks and
counts, per stream, the bytes gRPC has taken from it. The downloads are raw
sockets with a small receive buffer that read the response's head and never
its body: once a stream stops moving, what it has sent is all the gateway
holds for that download (in its buffers, its socket's and gRPC's
flow-control window), and beyond what the kernel may keep in the socket's
send buffer it must stay within a megabyte. The first downloads open at
once ask for larger chunks than the others. When the downloads are closed,
their media streams end at once, not read to the end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import grpc
import pytest

from gateway.media import PHOTO_CHUNK_BYTES, QUIET_CHUNK_BYTES, QUIET_DOWNLOADS
from gateway.signing import UrlSigner
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from tests.support.gateway import GatewayStack, RawConnection, poll_until
from tests.support.security import wait_until

MIB = 1 << 20
PHOTO = 32 * MIB
CHUNK = 256 * 1024
DOWNLOADS = 8
# What the gateway itself may hold per download, beside what its socket's send buffer holds.
GATEWAY_BOUND = 1 * MIB
HEAD_END = b"\r\n\r\n"


class CountingMedia(media_pb2_grpc.MediaServiceServicer):
    """ReadMedia of any selector: one big photo, counting what each stream has handed over."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        # Per stream: the bytes it had sent when it ended (None while it runs).
        self.ended: list[int | None] = []
        self.chunk_sizes: list[int] = []

    async def ReadMedia(
        self, request: media_pb2.ReadMediaRequest, context: Any
    ) -> AsyncIterator[media_pb2.ReadMediaResponse]:
        stream = len(self.sent)
        self.sent.append(0)
        self.chunk_sizes.append(request.chunk_size)
        self.ended.append(None)
        try:
            yield media_pb2.ReadMediaResponse(
                metadata=media_pb2.MediaMetadata(
                    content_type="image/png", size_bytes=PHOTO, sha256="0" * 64, safe_inline=True
                )
            )
            chunk = bytes(CHUNK)
            for _ in range(PHOTO // CHUNK):
                yield media_pb2.ReadMediaResponse(data=chunk)
                self.sent[stream] += CHUNK
        finally:
            self.ended[stream] = self.sent[stream]


@pytest.fixture
def counting(stack: GatewayStack) -> Iterator[tuple[CountingMedia, int]]:
    servicer = CountingMedia()  # type: ignore[abstract]  # the rest: UNIMPLEMENTED

    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        media_pb2_grpc.add_MediaServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = stack.pair.run(start())
    try:
        yield servicer, port
    finally:
        stack.pair.run(server.stop(0))


def _socket_send_buffer_max() -> int:
    """The most a TCP socket's send buffer may grow to (the kernel holds that part)."""
    return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])


def _steady(servicer: CountingMedia, seconds: float, timeout: float) -> list[int]:
    """The per-stream counts once none has moved for `seconds` (or at `timeout`)."""
    deadline = time.monotonic() + timeout
    last, since = list(servicer.sent), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = list(servicer.sent)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            break
    return last


def test_stalled_downloads_pull_a_bounded_part_and_end_their_streams_when_closed(
    stack: GatewayStack, counting: tuple[CountingMedia, int]
) -> None:
    servicer, port = counting
    config = stack.start_gateway(
        media_addr=f"127.0.0.1:{port}",
        max_downloads_per_url=DOWNLOADS,
        max_downloads_per_client=DOWNLOADS,
    )
    ref = "media:" + "a" * 64
    expires, signature = UrlSigner(config.signing_key(), 3600).sign(ref, "", "")
    query = urlencode({"pin": "", "p": "", "exp": expires, "sig": signature})
    url = f"/api/v1/media/{quote(ref, safe='/:')}?{query}"
    assert stack.gateway is not None
    connections = [RawConnection(stack.gateway.port, receive_buffer=4096) for _ in range(DOWNLOADS)]
    try:
        for connection in connections:
            connection.send(f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert poll_until(connections, lambda c: HEAD_END in c.received, 15, limit=2048)
        assert all(c.received.startswith(b"HTTP/1.1 200") for c in connections)
        sent = _steady(servicer, seconds=1.0, timeout=20)
        assert len(sent) == DOWNLOADS
        # The first few downloads open at once ask for larger chunks; the others for smaller.
        quiet = [QUIET_CHUNK_BYTES] * QUIET_DOWNLOADS
        busy = [PHOTO_CHUNK_BYTES] * (DOWNLOADS - QUIET_DOWNLOADS)
        assert sorted(servicer.chunk_sizes) == sorted(quiet + busy)
        bound = _socket_send_buffer_max() + GATEWAY_BOUND
        assert all(0 < count <= bound for count in sent), (sent, bound)
    finally:
        for connection in connections:
            connection.close()
    # The browsers left: their media streams are cancelled, not read to the end.
    assert wait_until(lambda: None not in servicer.ended, 10), servicer.ended
    assert all(count is not None and count < PHOTO for count in servicer.ended)
