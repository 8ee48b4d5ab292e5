"""The decoded-image cache (media_service.decoded) on a real server.

A miss is served from the file as without the cache, and only a whole image
whose hash checked is cached (a first read changed mid-stream: see
test_media_stream_errors.py, cache on and off); a cached image is served only
after the line was verified as it stands now, so a changed transcript gets the
contract's answer, never the cached bytes; ranges served from the cache equal
the file's; an entry evicted mid-stream frees its bytes and the stream goes on
from the file (DATA_LOSS if the file changed meanwhile); the pre-serialized
chunks are the wire format `ReadMediaResponse.SerializeToString()` gives.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import grpc
import pytest

from media_service.decoded import DecodedCache, Encoded
from media_service.entry_locator import EntryLocator
from media_service.servicer import MediaServicer
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from tests.integration.media.test_media_stream_errors import rewrite
from tests.support.media import (
    MediaEnv,
    StartMedia,
    dumps,
    entry,
    image_block,
    mint,
    png_bytes,
    read_error,
    read_media,
    write_transcript,
)
from tests.support.stamps import SHORT_SETTLING_SECONDS, count_calls, settle_quickly

IMAGE_SIZE = 4 * 1024 * 1024
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 * 1024)]


def _cache(env: MediaEnv) -> DecodedCache:
    servicer = env.server.servicer
    assert isinstance(servicer, MediaServicer)
    return servicer.instance.decoded


def _selector(ref: object) -> media_pb2.MediaSelector:
    return media_pb2.MediaSelector(media_ref=ref)  # type: ignore[arg-type]


async def test_second_read_is_a_hit_with_the_same_bytes(media: MediaEnv) -> None:
    payload = png_bytes(300_000, seed=1)
    line = dumps(entry("u-hit", [image_block(payload)]))
    write_transcript(media.root, "hit", [line])
    (ref,) = mint("hit", line)
    first = await read_media(media.stub, _selector(ref))
    second = await read_media(media.stub, _selector(ref))
    cache = _cache(media)
    assert (cache.misses, cache.hits) == (1, 1)
    assert first[1] == second[1] == payload
    assert first[0] == second[0]
    assert second[0].sha256 == hashlib.sha256(payload).hexdigest()
    assert second[2] == first[2]  # the same chunking


@pytest.mark.parametrize(
    ("offset", "limit"), [(0, 0), (70_000, 0), (65_536, 65_536), (1, 10), (299_999, 0)]
)
async def test_ranges_from_the_cache_equal_the_file(
    media: MediaEnv, offset: int, limit: int
) -> None:
    payload = png_bytes(300_000, seed=2)
    line = dumps(entry("u-range", [image_block(payload)]))
    write_transcript(media.root, "range", [line])
    (ref,) = mint("range", line)
    await read_media(media.stub, _selector(ref))  # cached
    _meta, data, _ = await read_media(media.stub, _selector(ref), offset, limit)
    assert _cache(media).hits == 1
    end = offset + limit if limit else len(payload)
    assert data == payload[offset:end]


async def test_a_rewritten_payload_is_never_served_from_the_cache(media: MediaEnv) -> None:
    payload = png_bytes(IMAGE_SIZE, seed=3)
    line = dumps(entry("u-rw", [image_block(payload)]))
    path = write_transcript(media.root, "rw", [line])
    (ref,) = mint("rw", line)
    assert (await read_media(media.stub, _selector(ref)))[1] == payload  # now cached
    rewrite(path, payload, "replaced")  # same offsets, same length, other bytes
    # The old ref: the line no longer has its pin (as without the cache).
    error = await read_error(media.stub, _selector(ref))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    # The new ref names the new bytes, never the cached ones.
    (new_ref,) = mint("rw", path.read_bytes().rstrip(b"\n"))
    other = base64.b64decode(image_block(png_bytes(IMAGE_SIZE, seed=9))["source"]["data"])
    meta, data, _ = await read_media(media.stub, _selector(new_ref))
    assert data == other != payload
    assert meta.sha256 == hashlib.sha256(other).hexdigest()


async def test_a_truncated_transcript_is_not_found_though_cached(media: MediaEnv) -> None:
    payload = png_bytes(300_000, seed=4)
    line = dumps(entry("u-cut", [image_block(payload)]))
    path = write_transcript(media.root, "cut", [line])
    (ref,) = mint("cut", line)
    await read_media(media.stub, _selector(ref))
    rewrite(path, payload, "truncated")
    error = await read_error(media.stub, _selector(ref))
    assert error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)
    assert _cache(media).hits == 0


@pytest.mark.parametrize("how", ["replaced", "truncated"])
async def test_evicted_mid_stream_goes_on_from_the_file(start_media: StartMedia, how: str) -> None:
    media = await start_media()
    payload = png_bytes(IMAGE_SIZE, seed=5)
    line = dumps(entry("u-ev", [image_block(payload)]))
    path = write_transcript(media.root, "ev", [line])
    (ref,) = mint("ev", line)
    await read_media(media.stub, _selector(ref))  # cached: the stream below hits
    # A channel that grants a fixed 64 KiB window: without it, BDP probing can grow
    # the window past the image and the cached chunks are all sent before the eviction.
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{media.server.port}", options=SMALL_WINDOW
    ) as channel:
        stub = media_pb2_grpc.MediaServiceStub(channel)
        call = stub.ReadMedia(media_pb2.ReadMediaRequest(media=_selector(ref)))
        await _evict_and_rewrite_mid_stream(media, call, path, payload, how)


async def _evict_and_rewrite_mid_stream(
    media: MediaEnv,
    call: grpc.aio.UnaryStreamCall[media_pb2.ReadMediaRequest, media_pb2.ReadMediaResponse],
    path: Path,
    payload: bytes,
    how: str,
) -> None:
    stream = aiter(call)
    first = await anext(stream)
    assert first.WhichOneof("item") == "metadata"
    cache = _cache(media)
    assert cache.total_bytes == IMAGE_SIZE
    cache.clear()  # evicted: the stream held it only weakly, so it is freed now
    rewrite(path, payload, how)
    received = 0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in stream:
            received += len(message.data)
    assert received < IMAGE_SIZE
    assert caught.value.code() == grpc.StatusCode.DATA_LOSS


async def test_evicted_mid_stream_still_sends_every_byte(start_media: StartMedia) -> None:
    media = await start_media()
    payload = png_bytes(IMAGE_SIZE, seed=6)
    line = dumps(entry("u-ev2", [image_block(payload)]))
    write_transcript(media.root, "ev2", [line])
    (ref,) = mint("ev2", line)
    await read_media(media.stub, _selector(ref))
    call = media.stub.ReadMedia(media_pb2.ReadMediaRequest(media=_selector(ref)))
    parts: list[bytes] = []
    async for message in call:
        if message.WhichOneof("item") == "metadata":
            _cache(media).clear()
        else:
            parts.append(message.data)
    assert b"".join(parts) == payload


async def test_a_partial_read_or_a_cancelled_stream_caches_nothing(media: MediaEnv) -> None:
    payload = png_bytes(IMAGE_SIZE, seed=10)
    line = dumps(entry("u-part", [image_block(payload)]))
    write_transcript(media.root, "part", [line])
    (ref,) = mint("part", line)
    _meta, data, _ = await read_media(media.stub, _selector(ref), 0, 100_000)
    assert data == payload[:100_000]
    cache = _cache(media)
    assert cache.total_bytes == 0
    call = media.stub.ReadMedia(media_pb2.ReadMediaRequest(media=_selector(ref)))
    await call.read()
    await call.read()
    call.cancel()
    await asyncio.sleep(0.2)
    assert cache.total_bytes == 0
    # The abandoned fill left no reservation behind: a whole read now caches it.
    assert (await read_media(media.stub, _selector(ref)))[1] == payload
    assert cache.total_bytes == IMAGE_SIZE


async def test_cache_off_serves_from_the_file(start_media: StartMedia) -> None:
    media = await start_media(decoded_cache_bytes=0)
    payload = png_bytes(300_000, seed=7)
    line = dumps(entry("u-off", [image_block(payload)]))
    write_transcript(media.root, "off", [line])
    (ref,) = mint("off", line)
    for _ in range(2):
        assert (await read_media(media.stub, _selector(ref)))[1] == payload
    cache = _cache(media)
    assert (cache.hits, cache.misses, cache.total_bytes) == (0, 0, 0)


async def test_images_over_the_item_bound_are_not_cached(start_media: StartMedia) -> None:
    media = await start_media(decoded_cache_bytes=1024 * 1024)
    payload = png_bytes(2 * 1024 * 1024, seed=8)
    line = dumps(entry("u-big", [image_block(payload)]))
    write_transcript(media.root, "big", [line])
    (ref,) = mint("big", line)
    assert (await read_media(media.stub, _selector(ref)))[1] == payload
    assert _cache(media).total_bytes == 0


@pytest.mark.parametrize("size", [0, 1, 127, 128, 65_536, 200_000])
def test_encoded_is_the_serialized_message(size: int) -> None:
    chunk = bytes(range(256)) * (size // 256) + b"\x07" * (size % 256)
    encoded = Encoded(memoryview(chunk))
    wire = media_pb2.ReadMediaResponse(data=chunk).SerializeToString()
    assert encoded.wire == wire
    assert bytes(encoded.data) == chunk
    assert media_pb2.ReadMediaResponse.FromString(encoded.wire).data == chunk


@pytest.mark.parametrize("read_after", ["at once", "once it settled again"])
async def test_a_settled_transcript_is_verified_once_until_it_changes(
    media: MediaEnv, monkeypatch: pytest.MonkeyPatch, read_after: str
) -> None:
    settle_quickly(monkeypatch)
    tries = count_calls(monkeypatch, EntryLocator, "try_line")
    payload = png_bytes(300_000, seed=5)
    line = dumps(entry("u-settled", [image_block(payload)]))
    path = write_transcript(media.root, "settled", [line])
    (ref,) = mint("settled", line)
    await asyncio.sleep(SHORT_SETTLING_SECONDS + 0.1)
    assert (await read_media(media.stub, _selector(ref)))[1] == payload
    assert tries.calls == 1
    # While the file keeps its stamp, the image is found again without reading its line.
    assert (await read_media(media.stub, _selector(ref)))[1] == payload
    assert tries.calls == 1 and _cache(media).hits == 1
    rewrite(path, payload, "replaced")  # same offsets, same length, other bytes
    if read_after == "once it settled again":
        await asyncio.sleep(SHORT_SETTLING_SECONDS + 0.1)
    # The write moved the file's change time: its line is read again, and no longer has the pin.
    error = await read_error(media.stub, _selector(ref))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert tries.calls > 1
