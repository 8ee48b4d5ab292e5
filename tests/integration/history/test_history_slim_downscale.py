"""Slim downscales over real history servers: bounded memory, a decode budget, reasons named.

Memory is the server process tree's PSS (summed over its processes), sampled
while SlimSession downscales a one-colour 8000x8000 RGBA PNG: a quarter of a
megabyte of file, 256 MB of pixels once decoded whole. The server shrinks it
while libvips decodes it, under its worker's decode budget; an image whose
frame would not fit that budget is cut, its stand-in naming why, and never
decoded.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.slim_downscale import (
    GROWTH_MAX_MB,
    LARGE,
    slim_downscale_growth,
    write_sessions,
)
from tests.support.history import HarnessFactory
from tests.support.rescue import image_block, line, noisy_png

# One worker: the figure is one process's, and the machine is shared.
ONE_WORKER = {"SCROLLBACK_HISTORY_WORKERS": "1"}
# Never decoding an image leaves memory where it was, give or take the copy's own buffers.
NOT_DECODED_MAX_MB = 40


def _images(copy: bytes) -> list[tuple[str, bytes]]:
    content = json.loads(copy)["message"]["content"]
    return [
        (b["source"]["media_type"], base64.b64decode(b["source"]["data"]))
        for b in content
        if b.get("type") == "image"
    ]


async def test_a_64_megapixel_png_is_downscaled_in_bounded_memory(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_sessions(root)
    server = procs.history_server(root, tmp_path / "state", settings=ONE_WORKER)
    async with server, services.channel(server.addr) as channel:
        stub: history_pb2_grpc.HistoryServiceAsyncStub = history_pb2_grpc.HistoryServiceStub(
            channel
        )
        idle, peak, copy, end = await slim_downscale_growth(server, stub)
    assert end.images_downscaled == 1 and end.images_replaced == 0
    ((media_type, data),) = _images(copy)
    with Image.open(io.BytesIO(data)) as image:
        assert (media_type, image.format, image.size) == ("image/png", "PNG", (2000, 2000))
        assert image.getpixel((1000, 1000)) == (10, 200, 30, 255)
    assert peak - idle < GROWTH_MAX_MB, f"PSS {idle:.0f} MB idle, {peak:.0f} MB at the peak"


async def test_an_image_over_the_decode_budget_is_cut_with_its_reason_never_decoded(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    write_sessions(root)
    budget = {**ONE_WORKER, "SCROLLBACK_HISTORY_DECODE_MEMORY_BYTES": str(64 * 1024 * 1024)}
    server = procs.history_server(root, tmp_path / "state", settings=budget)
    async with server, services.channel(server.addr) as channel:
        stub: history_pb2_grpc.HistoryServiceAsyncStub = history_pb2_grpc.HistoryServiceStub(
            channel
        )
        idle, peak, copy, end = await slim_downscale_growth(server, stub)
    assert end.images_downscaled == 0 and end.images_replaced == 1
    (text,) = [b["text"] for b in json.loads(copy)["message"]["content"] if b["type"] == "text"][1:]
    assert text.startswith("[image cut by scrollback slim: image/png,")
    assert "8000x8000 px" in text
    assert "not downscaled: larger than the server's decode memory budget" in text
    assert f"ref {LARGE}/{LARGE}/0 pin " in text  # the original still serves it
    assert peak - idle < NOT_DECODED_MAX_MB, f"PSS {idle:.0f} MB idle, {peak:.0f} MB at the peak"


async def test_a_line_over_the_max_line_size_is_downscaled_from_its_file(
    history_server: HarnessFactory,
) -> None:
    """Its payload is read slice by slice from the file, never held whole."""
    big = noisy_png(400, 300)  # about 350 KB: the line is several times the max line size
    entry = {
        "type": "user",
        "uuid": "d1",
        "message": {"role": "user", "content": [image_block(big)]},
    }
    async with history_server(max_line_size=64 * 1024) as harness:
        harness.transcript("wide").write_bytes(line(entry))
        request = hpb.SlimSessionRequest(
            session_id="wide", images=hpb.SLIM_IMAGES_DOWNSCALE, max_side=100, max_bytes=20_000
        )
        copy = bytearray()
        stub: Any = harness.stub
        async for message in stub.SlimSession(request):
            copy += message.data if message.HasField("data") else b""
    ((media_type, data),) = _images(bytes(copy))
    with Image.open(io.BytesIO(data)) as image:
        # A PNG stays PNG where it fits the bytes.
        assert (media_type, image.format, image.size) == ("image/png", "PNG", (100, 75))
    assert len(data) <= 20_000


async def test_reasons_are_named_for_images_not_downscaled(
    history_server: HarnessFactory,
) -> None:
    """Over the pixel limit (a header claiming 9000x9000) or refused by the decoder."""
    small = noisy_png(16, 16)
    bomb = small[:16] + (9000).to_bytes(4, "big") * 2 + small[24:]  # its IHDR claims 81 MP
    # The signature and an IHDR of 3000x3000 (over 2000 px: to downscale), then nothing.
    no_pixels = small[:16] + (3000).to_bytes(4, "big") * 2 + small[24:33]
    entry = {
        "type": "user",
        "uuid": "r1",
        "message": {"role": "user", "content": [image_block(bomb), image_block(no_pixels)]},
    }
    async with history_server() as harness:
        harness.transcript("why").write_bytes(line(entry))
        request = hpb.SlimSessionRequest(session_id="why", images=hpb.SLIM_IMAGES_DOWNSCALE)
        copy = bytearray()
        stub: Any = harness.stub
        async for message in stub.SlimSession(request):
            copy += message.data if message.HasField("data") else b""
    texts = [b["text"] for b in json.loads(bytes(copy))["message"]["content"]]
    assert "9000x9000 px, not downscaled: over 64,000,000 pixels, never decoded" in texts[0]
    assert "3000x3000 px, not downscaled: not a decodable PNG, JPEG, GIF or WebP" in texts[1]
    assert "; Scrollback still serves it: ref why/r1/0 pin " in texts[0]


def _screenshot_png(width: int, height: int) -> bytes:
    """A PNG as a screenshot is: few colours, sharp edges, no transparency."""
    image = Image.new("RGB", (width, height), (250, 250, 250))
    for y in range(0, height, 24):
        image.paste((20, 20, 20), (40, y, width - 40, y + 3))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


async def test_a_png_stays_png_where_it_fits_and_every_reason_is_counted(
    history_server: HarnessFactory,
) -> None:
    screenshot = _screenshot_png(2400, 1600)
    small = noisy_png(16, 16)
    bomb = small[:16] + (9000).to_bytes(4, "big") * 2 + small[24:]
    not_base64 = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                              "data": "%%%% not base64 %%%%" * 20}}  # fmt: skip
    entry = {
        "type": "user",
        "uuid": "p1",
        "message": {
            "role": "user",
            "content": [
                image_block(screenshot),
                image_block(bomb),
                not_base64,
                image_block(bomb),
            ],
        },
    }
    async with history_server() as harness:
        harness.transcript("png").write_bytes(line(entry))
        request = hpb.SlimSessionRequest(session_id="png", images=hpb.SLIM_IMAGES_DOWNSCALE)
        copy, ends = bytearray(), []
        stub: Any = harness.stub
        async for message in stub.SlimSession(request):
            copy += message.data if message.HasField("data") else b""
            if message.HasField("file_end"):
                ends.append(message.file_end)
    ((media_type, data),) = _images(bytes(copy))
    with Image.open(io.BytesIO(data)) as image:
        assert (media_type, image.format, image.size) == ("image/png", "PNG", (2000, 1333))
    texts = [b["text"] for b in json.loads(bytes(copy))["message"]["content"] if "text" in b]
    assert "undecodable, not downscaled: not valid base64, never decoded" in texts[1]
    (end,) = ends
    assert end.images_downscaled == 1 and end.images_replaced == 3
    assert [(n.reason, n.images) for n in end.not_downscaled] == [
        ("over 64,000,000 pixels, never decoded", 2),
        ("not valid base64, never decoded", 1),
    ]
