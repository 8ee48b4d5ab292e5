"""Thumbnail memory figure: media RSS during two concurrent 64 MP thumbnails, vs idle.

A fresh `python -m media_service` gets two distinct one-colour 8000x8000 RGBA
PNGs as blobs (a quarter of a megabyte each: the pixels compress to almost
nothing, 256 MB each once decoded whole). Its baseline is its RSS idle after
one small thumbnail (so libvips and the encode path are loaded); the figure is
its peak RSS (VmHWM, summed over its processes) after both 96 px thumbnails
were asked for at once. The
target is growth over that idle baseline: under +350 MB, however large the
frames are, since the encodes shrink while they decode and reserve memory
from the worker's thumbnail budget before they start.

`flat_png` writes such a PNG with the standard library only (the tests use it too).
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target

MB = 1_000_000
SIDE = 8000  # 64 MP, the thumbnailer's pixel limit
GROWTH_MAX_MB = 350
UPLOAD_CHUNK = 256 * 1024
# Rows compressed per zlib call: bounded memory while writing a large PNG.
_ROWS_PER_BLOCK = 256


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC."""
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def flat_png(width: int, height: int, rgba: tuple[int, int, int, int]) -> bytes:
    """A one-colour RGBA PNG of `width` x `height`, compressed row block by row block."""
    row = b"\x00" + bytes(rgba) * width  # filter type 0, then the pixels
    compressor = zlib.compressobj(9)
    parts = []
    for start in range(0, height, _ROWS_PER_BLOCK):
        parts.append(compressor.compress(row * min(_ROWS_PER_BLOCK, height - start)))
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + png_chunk(b"IDAT", b"".join(parts))
        + png_chunk(b"IEND", b"")
    )


async def write_blob(stub: media_pb2_grpc.MediaServiceAsyncStub, data: bytes) -> str:
    """Upload `data` as a blob; its `media:` ref."""
    sha256 = hashlib.sha256(data).hexdigest()

    def requests() -> list[media_pb2.WriteBlobRequest]:
        header = media_pb2.WriteBlobHeader(
            sha256=sha256, size_bytes=len(data), media_type="image/png"
        )
        messages = [media_pb2.WriteBlobRequest(header=header)]
        for at in range(0, len(data), UPLOAD_CHUNK):
            messages.append(media_pb2.WriteBlobRequest(data=data[at : at + UPLOAD_CHUNK]))
        return messages

    await stub.WriteBlob(iter(requests()))
    return f"media:{sha256}"


async def thumbnail(stub: media_pb2_grpc.MediaServiceAsyncStub, ref: str) -> int:
    """ReadMedia of the 96 px thumbnail of blob `ref`; the bytes received."""
    selector = media_pb2.MediaSelector(blob_ref=ref)
    call = stub.ReadMedia(
        media_pb2.ReadMediaRequest(media=selector, size=media_pb2.THUMBNAIL_SIZE_96)
    )
    received = 0
    async for message in call:
        received += len(message.data)
    return received


async def measure(work: Path, log: Callable[[str], None]) -> list[Figure]:
    """The figure, from a fresh media server under `work`."""
    root, state = work / "thumbs-root", work / "state-thumbs"
    root.mkdir(parents=True, exist_ok=True)
    big = [flat_png(SIDE, SIDE, (10 + n, 200, 30, 255)) for n in range(2)]
    small = flat_png(300, 200, (1, 2, 3, 255))
    async with (
        procs.media_server(root, state) as server,
        services.channel(server.addr) as channel,
    ):
        stub = media_pb2_grpc.MediaServiceStub(channel)
        refs = [await write_blob(stub, data) for data in big]
        await thumbnail(stub, await write_blob(stub, small))
        idle = server.rss_bytes() / MB
        await asyncio.gather(*(thumbnail(stub, ref) for ref in refs))
        peak = server.peak_rss_bytes() / MB
        workers = server.worker_count()
    log(f"thumbnails: idle {idle:.0f} MB, peak {peak:.0f} MB during two 64 MP encodes")
    return [
        Figure(
            key="thumbnail_rss_two_64mp",
            name=f"media service peak RSS (VmHWM summed over the parent and {workers} workers) "
            f"during two concurrent 96 px thumbnails of {SIDE}x{SIDE} RGBA PNGs "
            f"({len(big[0]) / MB:.2f} MB each), vs the same idle",
            figure=peak,
            baseline=idle,
            unit="MB",
            baseline_label="idle",
            ratio=peak / idle,
            target=Target(figure_max=round(idle + GROWTH_MAX_MB)),
            note=f"target: growth under +{GROWTH_MAX_MB} MB over idle",
        )
    ]
