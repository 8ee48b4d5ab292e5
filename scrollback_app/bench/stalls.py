"""Memory figures under stalled clients: RSS while they stall, and after they leave.

A hostile HTTP/2 client (`scrollback_app.bench.stalled.StalledClient`) opens
streams and never grants flow-control window. Against a fresh
`python -m media_service` it opens `media_streams` ReadMedia streams of one
photo; against a fresh `python -m history_service`, `windows` INLINE
ReadWindow streams over a transcript of large image lines. Each server's
baseline is its RSS idle after one whole read of the same thing (so caches
and code paths are in); the figures are its peak RSS while the streams stall
(sampled every 0.1 s) and its RSS `settle_seconds` after the client
disconnects. Targets are growth over that idle baseline: media +150 MB,
history +200 MB, and back within +60 MB after the client leaves.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from scrollback.contract.stripping import strip_line
from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.stalled import StalledClient
from scrollback_app.bench.transcripts import PNG_SIGNATURE

MB = 1_000_000
READ_MEDIA = "/scrollback.media.v1.MediaService/ReadMedia"
READ_WINDOW = "/scrollback.history.v1.HistoryService/ReadWindow"
# Growth over the idle baseline that each figure must stay under.
MEDIA_STALLED_MAX_MB = 150
HISTORY_STALLED_MAX_MB = 200
AFTER_MAX_MB = 60


@dataclass(frozen=True)
class StallSizes:
    """How hostile the clients are and how long they are watched."""

    photo_bytes: int = 10 * MB
    media_streams: int = 60
    windows: int = 16
    window_lines: int = 20
    line_bytes: int = 3 * MB  # each line's size (base64 of a 3/4-as-large image)
    hold_seconds: float = 4.0
    settle_seconds: float = 5.0


def image_line(uuid: str, raw_bytes: int) -> bytes:
    """One user line carrying a random PNG-looking image of `raw_bytes`."""
    data = base64.b64encode(PNG_SIGNATURE + os.urandom(raw_bytes - len(PNG_SIGNATURE)))
    source = {"type": "base64", "media_type": "image/png", "data": data.decode()}
    block = {"type": "image", "source": source}
    entry = {"type": "user", "uuid": uuid, "message": {"role": "user", "content": [block]}}
    return orjson.dumps(entry)


async def _peak_rss(server: procs.ServerProcess, seconds: float) -> int:
    """Highest RSS sampled every 0.1 s for `seconds` (VmHWM would include the warm-up)."""
    loop = asyncio.get_running_loop()
    peak, end = 0, loop.time() + seconds
    while loop.time() < end:
        peak = max(peak, server.rss_bytes())
        await asyncio.sleep(0.1)
    return peak


async def _settled_rss(server: procs.ServerProcess, seconds: float) -> int:
    await asyncio.sleep(seconds)
    return server.rss_bytes()


@dataclass(frozen=True)
class _Stalled:
    """One server's idle, stalled-peak and after-disconnect RSS, in bytes."""

    idle: int
    peak: int
    after: int


async def _stall(
    server: procs.ServerProcess, method: str, requests: list[bytes], sizes: StallSizes
) -> _Stalled:
    idle = await _settled_rss(server, 1.0)
    client = await asyncio.to_thread(StalledClient, "127.0.0.1", server.port)
    try:
        for request in requests:
            client.open(method, request)
        peak = await _peak_rss(server, sizes.hold_seconds)
    finally:
        await asyncio.to_thread(client.close)
    after = await _settled_rss(server, sizes.settle_seconds)
    return _Stalled(idle, peak, after)


async def _media(work: Path, sizes: StallSizes) -> _Stalled:
    root = work / "stall-media-root"
    (root / "proj").mkdir(parents=True, exist_ok=True)
    line = image_line("u-photo", sizes.photo_bytes)
    (root / "proj" / "photo.jsonl").write_bytes(line + b"\n")
    stripped = strip_line(line)
    if stripped is None or not stripped.images:
        raise RuntimeError("the stall photo line minted no ref")
    ref = ref_pb2.MediaRef(
        session_id="photo", entry_uuid="u-photo", index=0, pin=stripped.images[0].pin
    )
    request = media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(media_ref=ref))
    async with procs.media_server(root, work / "stall-media-state") as server:
        async with services.channel(server.addr) as channel:
            stub = media_pb2_grpc.MediaServiceStub(channel)
            if await services.drain_media(stub, ref) != sizes.photo_bytes:
                raise RuntimeError("the stall photo read back short")
        wire = request.SerializeToString()
        return await _stall(server, READ_MEDIA, [wire] * sizes.media_streams, sizes)


async def _history(work: Path, sizes: StallSizes) -> _Stalled:
    root = work / "stall-history-root"
    (root / "proj").mkdir(parents=True, exist_ok=True)
    raw = sizes.line_bytes * 3 // 4
    lines = (image_line(f"u-{index}", raw) + b"\n" for index in range(sizes.window_lines))
    (root / "proj" / "big.jsonl").write_bytes(b"".join(lines))

    def request(page_size: int) -> history_pb2.ReadWindowRequest:
        return history_pb2.ReadWindowRequest(
            session_id="big", page_size=page_size, media_mode=history_pb2.MEDIA_MODE_INLINE
        )

    async with procs.history_server(root, work / "stall-history-state") as server:
        async with services.channel(server.addr) as channel:
            stub = history_pb2_grpc.HistoryServiceStub(channel)
            async for _message in stub.ReadWindow(request(sizes.window_lines)):
                pass
        # A page size each, so no two streams share one window's scan.
        requests = [
            request(max(1, sizes.window_lines - index % sizes.window_lines)).SerializeToString()
            for index in range(sizes.windows)
        ]
        return await _stall(server, READ_WINDOW, requests, sizes)


def _figures(
    key: str, what: str, result: _Stalled, stalled_max: int, settle: float
) -> list[Figure]:
    idle, peak, after = result.idle / MB, result.peak / MB, result.after / MB
    return [
        Figure(
            key=f"{key}_stalled",
            name=f"{what}: RSS while they stall vs idle (target: +{stalled_max} MB)",
            figure=peak,
            baseline=idle,
            unit="MB",
            baseline_label="idle",
            ratio=peak / idle,
            target=Target(figure_max=round(idle + stalled_max)),
            note=f"growth {peak - idle:+.0f} MB",
        ),
        Figure(
            key=f"{key}_after",
            name=f"{what}: RSS {settle:g} s after they disconnect vs idle "
            f"(target: +{AFTER_MAX_MB} MB)",
            figure=after,
            baseline=idle,
            unit="MB",
            baseline_label="idle",
            ratio=after / idle,
            target=Target(figure_max=round(idle + AFTER_MAX_MB)),
            note=f"growth {after - idle:+.0f} MB",
        ),
    ]


async def measure(work: Path, sizes: StallSizes, log: Callable[[str], None]) -> list[Figure]:
    """The four figures: media and history, while stalled and after the clients leave."""
    media = await _media(work, sizes)
    log(
        f"stalled media: idle {media.idle / MB:.0f} MB, peak {media.peak / MB:.0f} MB, "
        f"after {media.after / MB:.0f} MB"
    )
    history = await _history(work, sizes)
    log(
        f"stalled history: idle {history.idle / MB:.0f} MB, peak {history.peak / MB:.0f} MB, "
        f"after {history.after / MB:.0f} MB"
    )
    photo = f"{sizes.photo_bytes / MB:.0f} MB"
    line = f"{sizes.line_bytes / MB:.0f} MB"
    return [
        *_figures(
            "stall_media",
            f"media server, {sizes.media_streams} stalled ReadMedia streams of a {photo} photo",
            media,
            MEDIA_STALLED_MAX_MB,
            sizes.settle_seconds,
        ),
        *_figures(
            "stall_history",
            f"history server, {sizes.windows} stalled INLINE windows of "
            f"{sizes.window_lines} x {line} lines",
            history,
            HISTORY_STALLED_MAX_MB,
            sizes.settle_seconds,
        ),
    ]
