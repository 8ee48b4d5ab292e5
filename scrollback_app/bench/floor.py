"""The floor server: a bare grpc.aio server that does no work but send.

It speaks the real services' RPCs so the same client code drives both:

- `ReadMedia` streams one image's bytes from memory (metadata first, then
  chunks of the same size the media service uses), whatever ref is asked for;
- `ReadWindow` replays a window captured from the real history server (the
  same `ReadWindowResponse` messages, already built, from memory);
  with `--serialized-window` it sends them as the bytes captured, serialized
  once at start (the wire's own cost, nothing built per call).

It is built by the same `scrollback.server.grpc_support.build_server` as the real
servers (same options, health, reflection), so the difference between the two
is the work the real servers do. Run as
`python -m scrollback_app.bench.floor --addr HOST:PORT --image FILE [--window FILE]`
where the window file holds length-prefixed serialized `ReadWindowResponse`s.
`--workers N` serves it from N processes on one port, as the real services do
(scrollback.server.workers), so the two compare at the same process count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from media_service.config import DEFAULT_CHUNK_SIZE
from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.server.grpc_support import add_servicer_sending_serialized, build_server
from scrollback.server.listening import wait_for_shutdown_signal
from scrollback.server.serialized import Serialized
from scrollback.server.worker_role import current_role
from scrollback.server.workers import supervise

Context = grpc.aio.ServicerContext[Any, Any]
_LENGTH = struct.Struct("<I")


def write_messages(path: Path, messages: Sequence[bytes]) -> None:
    """Store serialized messages, each prefixed by its length."""
    with open(path, "wb") as handle:
        for message in messages:
            handle.write(_LENGTH.pack(len(message)))
            handle.write(message)


def read_messages(path: Path) -> list[bytes]:
    """The serialized messages `write_messages` stored."""
    data = path.read_bytes()
    messages: list[bytes] = []
    position = 0
    while position < len(data):
        (length,) = _LENGTH.unpack_from(data, position)
        position += _LENGTH.size
        messages.append(data[position : position + length])
        position += length
    return messages


class FloorMedia(media_pb2_grpc.MediaServiceServicer):
    """ReadMedia from memory: the same bytes for every request."""

    def __init__(self, image: bytes, chunk_size: int) -> None:
        self._metadata = media_pb2.MediaMetadata(
            content_type="image/png",
            declared_media_type="image/png",
            size_bytes=len(image),
            sha256=hashlib.sha256(image).hexdigest(),
            safe_inline=True,
        )
        self._chunks = [image[i : i + chunk_size] for i in range(0, len(image), chunk_size)]

    async def ReadMedia(
        self, request: media_pb2.ReadMediaRequest, context: Context
    ) -> AsyncIterator[media_pb2.ReadMediaResponse]:
        """Metadata, then the chunks."""
        yield media_pb2.ReadMediaResponse(metadata=self._metadata)
        for chunk in self._chunks:
            yield media_pb2.ReadMediaResponse(data=chunk)


class FloorHistory(history_pb2_grpc.HistoryServiceServicer):
    """ReadWindow replaying one captured window from memory."""

    def __init__(self, window: Sequence[bytes]) -> None:
        self._window = [history_pb2.ReadWindowResponse.FromString(item) for item in window]

    async def ReadWindow(
        self, request: history_pb2.ReadWindowRequest, context: Context
    ) -> AsyncIterator[history_pb2.ReadWindowResponse]:
        """The captured messages, in order."""
        for message in self._window:
            yield message


class SerializedFloorHistory(history_pb2_grpc.HistoryServiceServicer):
    """ReadWindow sending one captured window's serialized messages as they are."""

    def __init__(self, window: Sequence[bytes]) -> None:
        self._window = [Serialized(item) for item in window]

    async def ReadWindow(  # type: ignore[override]  # serialized responses pass through
        self, request: history_pb2.ReadWindowRequest, context: Context
    ) -> AsyncIterator[Serialized]:
        """The captured bytes, in order."""
        for message in self._window:
            yield message


async def serve(
    addr: str, image: bytes, window: Sequence[bytes], chunk_size: int, serialized: bool = False
) -> None:
    """Serve until SIGINT/SIGTERM."""

    def register(server: grpc.aio.Server) -> None:
        media_pb2_grpc.add_MediaServiceServicer_to_server(
            FloorMedia(image, chunk_size),  # type: ignore[abstract]  # the rest: UNIMPLEMENTED
            server,
        )
        if serialized:
            add_servicer_sending_serialized(
                history_pb2_grpc.add_HistoryServiceServicer_to_server,
                SerializedFloorHistory(window),  # type: ignore[abstract]
                server,
                "scrollback.history.v1.HistoryService",
                ("ReadWindow",),
            )
            return
        history_pb2_grpc.add_HistoryServiceServicer_to_server(
            FloorHistory(window),  # type: ignore[abstract]
            server,
        )

    running = await build_server(
        addr,
        register,
        ("scrollback.media.v1.MediaService", "scrollback.history.v1.HistoryService"),
    )
    try:
        await wait_for_shutdown_signal()
    finally:
        await running.stop(0.5)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and serve."""
    parser = argparse.ArgumentParser(
        prog="python -m scrollback_app.bench.floor", description=__doc__
    )
    parser.add_argument("--addr", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--image", type=Path, required=True, help="the bytes ReadMedia streams")
    parser.add_argument("--window", type=Path, help="the captured ReadWindow messages")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    parser.add_argument(
        "--serialized-window",
        action="store_true",
        help="send the captured window as its bytes (no message built per call)",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes serving the port")
    args = parser.parse_args(argv)
    if args.workers > 1 and current_role() is None:
        return supervise(
            "scrollback_app.bench.floor",
            sys.argv[1:] if argv is None else argv,
            address=args.addr,
            count=args.workers,
            metrics_addr="",
            metrics_env="",
        )
    window = read_messages(args.window) if args.window else []
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(
                args.addr,
                args.image.read_bytes(),
                window,
                args.chunk_size,
                args.serialized_window,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
