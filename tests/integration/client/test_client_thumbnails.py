"""Thumbnails through the sync and asyncio clients and the CLI, over real servers."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from client import AsyncClient, Client
from scrollback.media.v1 import media_pb2 as mpb
from scrollback_app.cli import main
from tests.support.servers import ServerPair


def photo(width: int, height: int) -> bytes:
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def longest_side(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "WEBP"
        return max(image.size)


def test_sync_and_async_clients_read_and_fetch_thumbnails(client_servers: ServerPair) -> None:
    pair = client_servers
    original = photo(1000, 600)
    with Client(pair.history_addr, pair.media_addr) as sb:
        (upload,) = sb.media.upload([original])
        ref = upload.ref
        plain = sb.media.read_media(ref)
        sync_thumb = sb.media.read_media(ref, size=320)
        fetched = sb.media.fetch(ref, size=96)
        again = sb.media.fetch(ref, size=96)
        assert again is fetched  # from the client's cache, under the thumbnail's own key
        assert sb.media.fetch(ref).data == original  # the original is still the original
        with pytest.raises(ValueError, match="96, 320, 960"):
            sb.media.read_media(ref, size=100)
        stream = sb.media.open_media(ref, size=960)
        streamed = b"".join(stream.chunks())

    async def through_asyncio() -> tuple[bytes, bytes, bytes]:
        async with AsyncClient(pair.history_addr, pair.media_addr) as client:
            thumb = await client.media.read_media(ref, size=320)
            small = await client.media.fetch(ref, size=96)
            with pytest.raises(ValueError):
                await client.media.fetch(ref, size=1)
            stream = await client.media.open_media(ref, size=960)
            big = b"".join([chunk async for chunk in stream.chunks()])
            return thumb.data, small.data, big

    async_thumb, async_small, async_big = asyncio.run(through_asyncio())
    assert (plain.metadata.width, plain.metadata.height) == (1000, 600)
    assert sync_thumb.metadata.thumbnail_size == mpb.THUMBNAIL_SIZE_320
    assert sync_thumb.metadata.source_sha256 == hashlib.sha256(original).hexdigest()
    assert longest_side(sync_thumb.data) == 320 and async_thumb == sync_thumb.data
    assert longest_side(fetched.data) == 96 and async_small == fetched.data
    assert longest_side(streamed) == 960 and async_big == streamed


def test_stat_media_with_a_size_in_both_clients(client_servers: ServerPair) -> None:
    pair = client_servers
    original = photo(900, 300)
    with Client(pair.history_addr, pair.media_addr) as sb:
        (upload,) = sb.media.upload([original])
        (sized,) = sb.media.stat_media([upload.ref], size=320)
        (plain,) = sb.media.stat_media([upload.ref])
        with pytest.raises(ValueError, match="96, 320, 960"):
            sb.media.stat_media([upload.ref], size=100)

    async def through_asyncio() -> mpb.StatMediaResult:
        async with AsyncClient(pair.history_addr, pair.media_addr) as client:
            with pytest.raises(ValueError):
                await client.media.stat_media([upload.ref], size=1)
            (result,) = await client.media.stat_media([upload.ref], size=96)
            return result

    small = asyncio.run(through_asyncio())
    assert (sized.metadata.width, sized.metadata.height) == (320, 107)
    assert sized.metadata.thumbnail_size == mpb.THUMBNAIL_SIZE_320
    assert (plain.metadata.width, plain.metadata.height) == (900, 300)
    assert (small.metadata.width, small.metadata.height) == (96, 32)


def test_cli_media_size(
    capsys: pytest.CaptureFixture[str], client_servers: ServerPair, tmp_path: Path
) -> None:
    pair = client_servers
    original = photo(800, 400)
    with Client(pair.history_addr, pair.media_addr) as sb:
        (upload,) = sb.media.upload([original])
    addrs = ["--history-addr", pair.history_addr, "--media-addr", pair.media_addr]
    target = tmp_path / "thumb.webp"
    code = main(["media", *addrs, upload.ref, "--size", "320", "-o", str(target), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["contentType"] == "image/webp" and summary["width"] == 320
    assert longest_side(target.read_bytes()) == 320
    with pytest.raises(SystemExit):
        main(["media", *addrs, upload.ref, "--size", "100", "-o", str(target)])
    assert "invalid choice" in capsys.readouterr().err
