"""Thumbnails over a real media server (issue 17, docs/contract.md §13): each size, WebP,
cached by (sha256, size), collected by GC, a still of an animation, bounded decoding,
width and height of the original from its header, the owner rule, and reads that a
flood of thumbnails does not starve.

The cache, GC, animation and bomb tests run on both state backends (`backed_media`:
SQLite, and PostgreSQL as tests/support/backends.py provides it), since the cache
sits beside blob rows whose store differs."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from PIL import Image

from media_service.gc import collect_garbage
from media_service.library import MediaLibrary, ThumbnailJob
from media_service.thumbnail_encodes import ThumbnailEncodes
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback.server.auth import SecuritySettings
from scrollback_app.bench.procs import proc_status_kib
from scrollback_app.bench.thumbnails import flat_png
from tests.support.backends import state_backend
from tests.support.media import (
    MediaEnv,
    StartMedia,
    dumps,
    entry,
    image_block,
    mint,
    png_with_empty_chunks,
    read_media,
    write_transcript,
)
from tests.support.security import ServerProcess, auth, upload, write_token_file

SIZES = {
    media_pb2.THUMBNAIL_SIZE_96: 96,
    media_pb2.THUMBNAIL_SIZE_320: 320,
    media_pb2.THUMBNAIL_SIZE_960: 960,
}


def photo(width: int, height: int, seed: int = 0, fmt: str = "PNG") -> bytes:
    """A real image of these dimensions (a gradient, so it decodes to pixels)."""
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    # Some noise, so the file is large enough that the history service strips it.
    noise = Image.effect_noise((min(width, 160), min(height, 160)), 80).convert("RGB")
    image.paste(noise, (0, 0))
    image.putpixel((0, 0), (seed % 256, seed // 256 % 256, 7))
    out = io.BytesIO()
    image.save(out, fmt, compress_level=1) if fmt == "PNG" else image.save(out, fmt)
    return out.getvalue()


def animated_gif() -> bytes:
    """A two-frame GIF: a red frame, then a blue one."""
    red = Image.new("RGB", (400, 200), (255, 0, 0))
    blue = Image.new("RGB", (400, 200), (0, 0, 255))
    out = io.BytesIO()
    red.save(out, "GIF", save_all=True, append_images=[blue], duration=100, loop=0)
    return out.getvalue()


def png_bomb(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims `width` x `height` pixels (a decompression bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 4096)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Media config overrides selecting the state backend (set up before the servers,
    so its PostgreSQL database outlives them)."""
    yield from state_backend(request.param)


@pytest.fixture
async def backed_media(backend: dict[str, Any], start_media: StartMedia) -> MediaEnv:
    """A media server on the state backend of `backend`."""
    return await start_media(**backend)


def blob_selector(data: bytes) -> media_pb2.MediaSelector:
    return media_pb2.MediaSelector(blob_ref=f"media:{hashlib.sha256(data).hexdigest()}")


async def read_thumbnail(
    media: MediaEnv | media_pb2_grpc.MediaServiceStub,
    selector: media_pb2.MediaSelector,
    size: media_pb2.ThumbnailSize.ValueType,
    metadata: tuple[tuple[str, str], ...] | None = None,
    deadline: float | None = None,
) -> tuple[media_pb2.MediaMetadata, bytes]:
    got: media_pb2.MediaMetadata | None = None
    chunks: list[bytes] = []
    stub = media.stub if isinstance(media, MediaEnv) else media
    call = stub.ReadMedia(
        media_pb2.ReadMediaRequest(media=selector, size=size), metadata=metadata, timeout=deadline
    )
    async for message in call:
        if message.WhichOneof("item") == "metadata":
            got = message.metadata
        else:
            chunks.append(message.data)
    assert got is not None
    return got, b"".join(chunks)


async def thumbnail_error(
    media: MediaEnv,
    selector: media_pb2.MediaSelector,
    size: media_pb2.ThumbnailSize.ValueType,
    metadata: tuple[tuple[str, str], ...] | None = None,
) -> grpc.aio.AioRpcError:
    try:
        await read_thumbnail(media, selector, size, metadata)
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("ReadMedia succeeded")


def library_of(media: MediaEnv) -> MediaLibrary:
    assert media.server.library is not None
    return media.server.library


def rchar() -> int:
    """Bytes this process (the server runs in it) has read through read syscalls."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


async def test_each_size_of_a_blob_is_a_webp_of_that_longest_side(media: MediaEnv) -> None:
    original = photo(1600, 1000)
    await upload(media.stub, original)
    for size, pixels in SIZES.items():
        got, data = await read_thumbnail(media, blob_selector(original), size)
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "WEBP"
            assert max(image.size) == pixels
            assert image.size == (pixels, round(pixels * 1000 / 1600))
            assert (got.width, got.height) == image.size
        assert got.content_type == "image/webp" and got.safe_inline
        assert got.thumbnail_size == size
        assert got.size_bytes == len(data) and got.sha256 == hashlib.sha256(data).hexdigest()
        assert got.source_sha256 == hashlib.sha256(original).hexdigest()
        assert not got.still_of_animation
    # The original is unchanged and says its own dimensions.
    plain, data, _ = await read_media(media.stub, blob_selector(original))
    assert data == original
    assert (plain.width, plain.height) == (1600, 1000)
    assert plain.thumbnail_size == media_pb2.THUMBNAIL_SIZE_UNSPECIFIED


async def test_a_jpeg_is_shrunk_upright_and_a_webp_keeps_its_alpha(media: MediaEnv) -> None:
    # EXIF orientation 6 (rotate 90): the stored 400 x 200 frame shows as 200 x 400.
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    Image.new("RGB", (400, 200), (0, 128, 255)).save(out, "JPEG", exif=exif)
    jpeg = out.getvalue()
    out = io.BytesIO()
    Image.new("RGBA", (300, 150), (255, 0, 0, 64)).save(out, "WEBP")
    webp = out.getvalue()
    for data in (jpeg, webp):
        await upload(media.stub, data)
    got, data = await read_thumbnail(media, blob_selector(jpeg), media_pb2.THUMBNAIL_SIZE_96)
    assert (got.width, got.height) == (48, 96)
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "WEBP" and image.size == (48, 96)
    got, data = await read_thumbnail(media, blob_selector(webp), media_pb2.THUMBNAIL_SIZE_96)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (96, 48) and image.mode == "RGBA"
        assert image.getpixel((48, 24))[3] < 100  # type: ignore[index]


async def test_a_thumbnail_is_encoded_once_then_served_from_the_cache(
    backed_media: MediaEnv,
) -> None:
    media = backed_media
    original = photo(1200, 900, seed=1)
    await upload(media.stub, original)
    cache = library_of(media).thumbnails
    before = cache.encodes
    first, data = await read_thumbnail(media, blob_selector(original), media_pb2.THUMBNAIL_SIZE_320)
    assert cache.encodes == before + 1
    second, again = await read_thumbnail(
        media, blob_selector(original), media_pb2.THUMBNAIL_SIZE_320
    )
    assert cache.encodes == before + 1, "the second read re-encoded"
    assert again == data and second == first
    # The cache entry is the file keyed by (sha256 of the original, size) in the blob store.
    path = library_of(media).blobs.paths.thumbnail(
        hashlib.sha256(original).hexdigest(), 320, still=False
    )
    assert path.read_bytes() == data
    # Another size is another cache entry.
    await read_thumbnail(media, blob_selector(original), media_pb2.THUMBNAIL_SIZE_96)
    assert cache.encodes == before + 2
    # Ranges apply to the thumbnail's bytes.
    call = media.stub.ReadMedia(
        media_pb2.ReadMediaRequest(
            media=blob_selector(original), size=media_pb2.THUMBNAIL_SIZE_320, read_offset=10
        )
    )
    tail = b"".join([m.data async for m in call if m.WhichOneof("item") == "data"])
    assert tail == data[10:]


async def test_concurrent_reads_of_one_new_thumbnail_share_one_encode(
    media: MediaEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = photo(3000, 2000, seed=11)  # an encode long enough for the calls to meet
    await upload(media.stub, original)
    cache = library_of(media).thumbnails
    before = cache.encodes
    selector = blob_selector(original)
    log = EncodeLog(monkeypatch)
    # One caller gives up while the encode runs; the others still get the thumbnail.
    leaving = asyncio.ensure_future(read_thumbnail(media, selector, media_pb2.THUMBNAIL_SIZE_320))
    staying = [
        asyncio.ensure_future(read_thumbnail(media, selector, media_pb2.THUMBNAIL_SIZE_320))
        for _ in range(7)
    ]
    deadline = time.monotonic() + 30
    while log.count("started") < 1:
        assert time.monotonic() < deadline, "the encode never started"
        await asyncio.sleep(0.005)
    leaving.cancel()
    results = await asyncio.gather(*staying)
    assert cache.encodes == before + 1, "each caller encoded its own copy"
    assert len({data for _meta, data in results}) == 1
    with Image.open(io.BytesIO(results[0][1])) as image:
        assert max(image.size) == 320
    # Done: the next caller reads the cache.
    await read_thumbnail(media, selector, media_pb2.THUMBNAIL_SIZE_320)
    assert cache.encodes == before + 1


async def test_a_queued_encode_whose_caller_leaves_is_never_made(
    start_media: StartMedia, monkeypatch: pytest.MonkeyPatch
) -> None:
    media = await start_media(thumbnail_threads=1)
    running, queued = photo(2600, 2600, seed=60), photo(2600, 2600, seed=61)
    for original in (running, queued):
        await upload(media.stub, original)
    log = EncodeLog(monkeypatch)
    first = asyncio.ensure_future(
        read_thumbnail(media, blob_selector(running), media_pb2.THUMBNAIL_SIZE_960)
    )
    deadline = time.monotonic() + 30
    while log.count("started") < 1:
        assert time.monotonic() < deadline, "the first encode never started"
        await asyncio.sleep(0.005)
    # The second waits behind the first on the one thread; its caller leaves meanwhile.
    leaving = asyncio.ensure_future(
        read_thumbnail(media, blob_selector(queued), media_pb2.THUMBNAIL_SIZE_960)
    )
    while log.count("handed") < 2:
        assert time.monotonic() < deadline, "the second encode was never handed in"
        await asyncio.sleep(0.005)
    leaving.cancel()
    await first
    encodes = media.server.servicer.instance.thumbnail_encodes if media.server.servicer else None
    assert encodes is not None
    while encodes.running or encodes.queued:
        assert time.monotonic() < deadline, "the encodes never drained"
        await asyncio.sleep(0.005)
    assert log.count("started") == 1, "the encode nobody waited for was made"
    assert encodes.reserved == 0
    # Asked again, it is made then.
    got, _ = await read_thumbnail(media, blob_selector(queued), media_pb2.THUMBNAIL_SIZE_960)
    assert got.thumbnail_size == media_pb2.THUMBNAIL_SIZE_960
    assert log.count("started") == 2


async def test_a_transcript_image_has_thumbnails_and_dimensions(media: MediaEnv) -> None:
    original = photo(2000, 500, seed=2)
    line = dumps(entry("u-photo", [image_block(original)]))
    write_transcript(media.root, "sess", [line])
    (ref,) = mint("sess", line)
    selector = media_pb2.MediaSelector(media_ref=ref)
    got, data = await read_thumbnail(media, selector, media_pb2.THUMBNAIL_SIZE_960)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (960, 240)
    assert got.pin == ref.pin and got.source_sha256 == hashlib.sha256(original).hexdigest()
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[selector]))
    assert (stat.results[0].metadata.width, stat.results[0].metadata.height) == (2000, 500)
    # A stale pin is refused for the thumbnail exactly as for the original.
    stale = ref_pb2.MediaRef()
    stale.CopyFrom(ref)
    stale.pin = "0" * 32
    error = await thumbnail_error(
        media, media_pb2.MediaSelector(media_ref=stale), media_pb2.THUMBNAIL_SIZE_96
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_gc_removes_thumbnails_with_their_blob_and_unused_ones(
    backed_media: MediaEnv,
) -> None:
    media = backed_media
    blob = photo(800, 600, seed=3)
    await upload(media.stub, blob)
    await read_thumbnail(media, blob_selector(blob), media_pb2.THUMBNAIL_SIZE_96)
    in_transcript = photo(700, 700, seed=4)
    line = dumps(entry("u-t", [image_block(in_transcript)]))
    write_transcript(media.root, "sess", [line])
    (ref,) = mint("sess", line)
    await read_thumbnail(media, media_pb2.MediaSelector(media_ref=ref), media_pb2.THUMBNAIL_SIZE_96)
    library = library_of(media)
    paths = library.blobs.paths
    blob_sha = hashlib.sha256(blob).hexdigest()
    image_sha = hashlib.sha256(in_transcript).hexdigest()
    assert paths.thumbnails_of(blob_sha) and paths.thumbnails_of(image_sha)

    # Within the grace period nothing goes.
    report = collect_garbage(library.blobs, now=time.time(), grace_seconds=3600)
    assert report.thumbnails_deleted == 0
    assert paths.thumbnails_of(blob_sha) and paths.thumbnails_of(image_sha)

    # Past it: the unreferenced blob goes with its thumbnail, the unused one goes too.
    report = collect_garbage(library.blobs, now=time.time() + 7200, grace_seconds=3600)
    assert blob_sha in report.deleted
    assert report.thumbnails_deleted == 2
    assert not paths.thumbnails_of(blob_sha) and not paths.thumbnails_of(image_sha)
    assert not paths.thumbnail_dir(blob_sha).exists()

    # A transcript thumbnail used within the grace period stays.
    await read_thumbnail(media, media_pb2.MediaSelector(media_ref=ref), media_pb2.THUMBNAIL_SIZE_96)
    for path in paths.thumbnails_of(image_sha):
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    await read_thumbnail(
        media, media_pb2.MediaSelector(media_ref=ref), media_pb2.THUMBNAIL_SIZE_96
    )  # a cache hit: a use
    report = collect_garbage(library.blobs, now=time.time(), grace_seconds=3600)
    assert report.thumbnails_deleted == 0 and paths.thumbnails_of(image_sha)


async def test_an_animated_gif_gives_a_marked_still_of_its_first_frame(
    backed_media: MediaEnv,
) -> None:
    media = backed_media
    gif = animated_gif()
    await upload(media.stub, gif)
    for _ in range(2):  # made, then from the cache: the mark is kept
        got, data = await read_thumbnail(media, blob_selector(gif), media_pb2.THUMBNAIL_SIZE_96)
        assert got.still_of_animation
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "WEBP" and image.size == (96, 48)
            assert not getattr(image, "is_animated", False)
            red, _green, blue = image.convert("RGB").getpixel((48, 24))  # type: ignore[misc]
            assert red > 200 and blue < 50, "not the first (red) frame"
    still = photo(300, 200, seed=5)
    await upload(media.stub, still)
    got, _ = await read_thumbnail(media, blob_selector(still), media_pb2.THUMBNAIL_SIZE_96)
    assert not got.still_of_animation


async def test_a_decompression_bomb_is_resource_exhausted_without_decoding(
    backed_media: MediaEnv,
) -> None:
    media = backed_media
    # 10^8 pixels: over the thumbnailer's limit, under Pillow's own bomb error,
    # so only the size check before decoding refuses it (300 MB of RGB otherwise).
    bomb = png_bomb(10_000, 10_000)
    assert len(bomb) < 200
    await upload(media.stub, bomb)
    peak_before = _max_rss_kib()
    cache = library_of(media).thumbnails
    before = cache.encodes
    error = await thumbnail_error(media, blob_selector(bomb), media_pb2.THUMBNAIL_SIZE_96)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "pixels" in (error.details() or "")
    assert _max_rss_kib() - peak_before < 100 * 1024, "the bomb was decoded"
    assert cache.encodes == before
    # Its claimed dimensions are still known, from the header alone.
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[blob_selector(bomb)]))
    assert (stat.results[0].metadata.width, stat.results[0].metadata.height) == (10_000, 10_000)


async def test_a_gif_frame_larger_than_its_screen_is_refused_without_decoding(
    media: MediaEnv,
) -> None:
    # A real 3000 x 3000 GIF whose logical screen claims 10 x 10: the decoder would grow its
    # canvas to the frame, past what the pixel limit and the memory budget were checked for.
    out = io.BytesIO()
    Image.new("P", (3000, 3000)).save(out, "GIF")
    gif = bytearray(out.getvalue())
    gif[6:10] = struct.pack("<HH", 10, 10)
    await upload(media.stub, bytes(gif))
    cache = library_of(media).thumbnails
    before = cache.encodes
    error = await thumbnail_error(media, blob_selector(bytes(gif)), media_pb2.THUMBNAIL_SIZE_96)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert cache.encodes == before
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[blob_selector(bytes(gif))]))
    assert (stat.results[0].metadata.width, stat.results[0].metadata.height) == (10, 10)


def _max_rss_kib() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def test_dimensions_of_a_large_blob_come_from_its_header_only(media: MediaEnv) -> None:
    # A real PNG followed by 24 MB of trailing bytes: the blob is large, its header tiny.
    big = photo(640, 480, seed=6) + os.urandom(24 * 1024 * 1024)
    await upload(media.stub, big)
    before = rchar()
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[blob_selector(big)]))
    read = rchar() - before
    metadata = stat.results[0].metadata
    assert (metadata.width, metadata.height) == (640, 480)
    assert metadata.size_bytes == len(big)
    assert read < 2 * 1024 * 1024, f"StatMedia read {read} bytes of a {len(big)} byte blob"


async def test_a_non_image_or_a_bad_size_is_refused(media: MediaEnv) -> None:
    text = b"just some text, not an image" * 10
    await upload(media.stub, text)
    error = await thumbnail_error(media, blob_selector(text), media_pb2.THUMBNAIL_SIZE_96)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    original = photo(200, 100, seed=7)
    await upload(media.stub, original)
    error = await thumbnail_error(
        media,
        blob_selector(original),
        99,  # type: ignore[arg-type]
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_another_principal_cannot_thumbnail_a_blob_it_cannot_read(
    start_media: StartMedia, tmp_path: Path
) -> None:
    tokens = write_token_file(tmp_path / "tokens.yaml")
    media = await start_media(security=SecuritySettings(auth_tokens=tokens))
    original = photo(500, 400, seed=8)
    await upload(media.stub, original, metadata=auth("alice"))
    got, _ = await read_thumbnail(
        media, blob_selector(original), media_pb2.THUMBNAIL_SIZE_96, auth("alice")
    )
    assert got.thumbnail_size == media_pb2.THUMBNAIL_SIZE_96
    # The thumbnail is cached now; bob still gets the NOT_FOUND of an unknown blob.
    error = await thumbnail_error(
        media, blob_selector(original), media_pb2.THUMBNAIL_SIZE_96, auth("bob")
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    unknown = await thumbnail_error(
        media, blob_selector(b"never uploaded"), media_pb2.THUMBNAIL_SIZE_96, auth("bob")
    )
    assert (unknown.code(), unknown.details()) == (error.code(), error.details())


async def test_a_flood_of_thumbnails_does_not_starve_plain_reads(media: MediaEnv) -> None:
    originals = [photo(1800, 1800, seed=10 + n) for n in range(24)]
    for original in originals:
        await upload(media.stub, original)
    small = photo(64, 64, seed=99)
    await upload(media.stub, small)
    cache = library_of(media).thumbnails
    before = cache.encodes
    flood = [
        asyncio.ensure_future(
            read_thumbnail(media, blob_selector(o), media_pb2.THUMBNAIL_SIZE_960, deadline=120)
        )
        for o in originals
    ]
    encodes = media.server.servicer.instance.thumbnail_encodes if media.server.servicer else None
    assert encodes is not None
    try:
        deadline = time.monotonic() + 30
        while encodes.queued + encodes.running + cache.encodes - before < len(flood) // 2:
            assert time.monotonic() < deadline, "the flood never reached the encoder"
            await asyncio.sleep(0.005)
        started = time.monotonic()
        _, data, _ = await read_media(media.stub, blob_selector(small), deadline_seconds=5)
        waited = time.monotonic() - started
        assert data == small
        pending = sum(not f.done() for f in flood)
        print(f"plain read answered in {waited:.3f} s with {pending} thumbnails pending")
        # Reads never queue behind encodes: the read is answered while most of the
        # flood still waits for the two thumbnail threads (before they had their own
        # executor, it waited until the flood had taken its turn on the read threads).
        assert pending >= len(flood) // 2, f"only {pending} of {len(flood)} still pending"
        results = await asyncio.gather(*flood)
        assert all(meta.thumbnail_size == media_pb2.THUMBNAIL_SIZE_960 for meta, _ in results)
        assert cache.encodes - before == len(originals)
    finally:
        for future in flood:
            future.cancel()


async def test_stat_media_with_a_size_gives_each_thumbnails_metadata(
    backed_media: MediaEnv,
) -> None:
    media = backed_media
    wide = photo(1600, 400, seed=20)
    await upload(media.stub, wide)
    in_transcript = photo(300, 900, seed=21)
    line = dumps(entry("u-s", [image_block(in_transcript)]))
    write_transcript(media.root, "sess", [line])
    (ref,) = mint("sess", line)
    gif = animated_gif()
    await upload(media.stub, gif)
    bomb = png_bomb(10_000, 10_000)
    await upload(media.stub, bomb)
    text = b"not an image at all" * 20
    await upload(media.stub, text)
    cache = library_of(media).thumbnails
    before = cache.encodes
    stat = await media.stub.StatMedia(
        media_pb2.StatMediaRequest(
            media=[
                blob_selector(wide),
                media_pb2.MediaSelector(media_ref=ref),
                blob_selector(gif),
                blob_selector(bomb),
                blob_selector(text),
                blob_selector(b"never uploaded"),
                media_pb2.MediaSelector(blob_ref="media:nope"),
            ],
            size=media_pb2.THUMBNAIL_SIZE_320,
        )
    )
    results = list(stat.results)
    assert [r.WhichOneof("result") for r in results] == ["metadata"] * 3 + ["error"] * 4
    assert [r.error.code for r in results[3:]] == [
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "NOT_FOUND",
        "INVALID_ARGUMENT",
    ]
    assert cache.encodes == before + 3, "each thumbnail is made once, by the stat"
    # Each result describes the thumbnail ReadMedia then serves from the cache.
    for result, selector in zip(
        results[:3],
        [blob_selector(wide), media_pb2.MediaSelector(media_ref=ref), blob_selector(gif)],
        strict=True,
    ):
        got, data = await read_thumbnail(media, selector, media_pb2.THUMBNAIL_SIZE_320)
        assert result.metadata == got
        with Image.open(io.BytesIO(data)) as image:
            assert (result.metadata.width, result.metadata.height) == image.size
    assert cache.encodes == before + 3, "ReadMedia re-encoded what the stat made"
    assert (results[0].metadata.width, results[0].metadata.height) == (320, 80)
    assert (results[1].metadata.width, results[1].metadata.height) == (107, 320)
    assert results[1].metadata.source_sha256 == hashlib.sha256(in_transcript).hexdigest()
    assert results[2].metadata.still_of_animation
    assert results[0].metadata.thumbnail_size == media_pb2.THUMBNAIL_SIZE_320
    # Without a size, the same call still describes the originals.
    plain = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[blob_selector(wide)]))
    assert (plain.results[0].metadata.width, plain.results[0].metadata.height) == (1600, 400)


async def test_stat_media_bounds_sized_calls(media: MediaEnv) -> None:
    original = photo(200, 100, seed=22)
    await upload(media.stub, original)
    many = [blob_selector(original)] * 101
    # 101 plain stats are fine; 101 with a size are refused whole, before any work.
    plain = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=many))
    assert len(plain.results) == 101
    before = library_of(media).thumbnails.encodes
    for size, count in ((media_pb2.THUMBNAIL_SIZE_96, 101), (99, 1)):
        try:
            await media.stub.StatMedia(
                media_pb2.StatMediaRequest(media=many[:count], size=size)  # type: ignore[arg-type]
            )
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        else:
            raise AssertionError("StatMedia succeeded")
    assert library_of(media).thumbnails.encodes == before
    hundred = await media.stub.StatMedia(
        media_pb2.StatMediaRequest(media=many[:100], size=media_pb2.THUMBNAIL_SIZE_96)
    )
    assert {r.metadata.width for r in hundred.results} == {96}
    assert library_of(media).thumbnails.encodes == before + 1, "one selector, made once"


async def _line_index_builds_ended() -> None:
    """Wait until no background line index build (scrollback.lineindex) runs in this process."""
    deadline = time.monotonic() + 30
    while any(t.name == "line-index-build" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a background line index build never ended"
        await asyncio.sleep(0.01)


async def test_dimensions_come_from_fixed_header_fields_not_a_walk_of_the_chunks(
    start_media: StartMedia,
) -> None:
    # 400,000 empty ancillary chunks (4.8 MB) between IHDR and IDAT of a real PNG, and the
    # baseline: as many after IDAT, where no reader of the header goes.
    chunky = png_with_empty_chunks(640, 480, 400_000)
    baseline = png_with_empty_chunks(640, 480, 400_000, before_idat=False, seed=1)
    assert len(chunky) == len(baseline)
    media = await start_media()
    lines = {}
    for name, data in (("chunky", chunky), ("baseline", baseline)):
        await upload(media.stub, data)
        lines[name] = dumps(entry(f"u-{name}", [image_block(data)]))
        write_transcript(media.root, name, [lines[name]])
    refs = {name: mint(name, line)[0] for name, line in lines.items()}
    # A fresh server over the same state: nothing about either image is remembered yet.
    media = await start_media()
    before = rchar()
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[blob_selector(chunky)]))
    read = rchar() - before
    assert (stat.results[0].metadata.width, stat.results[0].metadata.height) == (640, 480)
    assert read < 256 * 1024, f"StatMedia read {read} bytes of a {len(chunky)} byte blob"
    # A plain ReadMedia reads what it hashes and sends, the same for both images; a walk of
    # the chunks before IDAT would read them once more.
    read_by: dict[str, int] = {}
    for name, data in (("chunky", chunky), ("baseline", baseline)):
        for kind, selector in (
            ("blob", blob_selector(data)),
            ("transcript", media_pb2.MediaSelector(media_ref=refs[name])),
        ):
            await _line_index_builds_ended()
            before = rchar()
            got, sent, _ = await read_media(media.stub, selector)
            # A transcript's first read starts its line index build on a thread; counted
            # whole in its own window (the two transcripts are the same size), never in another.
            await _line_index_builds_ended()
            read_by[f"{name} {kind}"] = rchar() - before
            assert sent == data
            assert (got.width, got.height) == (640, 480)
    print(read_by)
    for kind in ("blob", "transcript"):
        extra = read_by[f"chunky {kind}"] - read_by[f"baseline {kind}"]
        assert extra < 512 * 1024, f"{kind}: {extra} bytes more than the baseline's read"
    # Its thumbnail is made as of any PNG.
    got, _ = await read_thumbnail(media, blob_selector(chunky), media_pb2.THUMBNAIL_SIZE_96)
    assert (got.width, got.height) == (96, 72)


class EncodeLog:
    """The order in which encodes are handed to ThumbnailEncodes and start, by original's
    sha256 (both real methods still run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str]] = []
        handed, started = ThumbnailEncodes.run, ThumbnailJob.run

        def hand(encodes: ThumbnailEncodes, job: ThumbnailJob, *args: Any) -> Any:
            self.events.append(("handed", job.source.info.sha256))
            return handed(encodes, job, *args)

        def start(job: ThumbnailJob) -> Any:
            self.events.append(("started", job.source.info.sha256))
            return started(job)

        monkeypatch.setattr(ThumbnailEncodes, "run", hand)
        monkeypatch.setattr(ThumbnailJob, "run", start)

    def count(self, kind: str) -> int:
        return sum(event == kind for event, _ in self.events)

    def index(self, kind: str, sha256: str) -> int:
        return self.events.index((kind, sha256))


async def test_one_callers_queue_delays_anothers_thumbnail_by_one_encode_at_most(
    start_media: StartMedia, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = write_token_file(tmp_path / "tokens.yaml")
    # One encode thread: a turn is exactly one encode.
    media = await start_media(security=SecuritySettings(auth_tokens=tokens), thumbnail_threads=1)
    big = [photo(2600, 2600, seed=30 + n) for n in range(6)]
    for original in big:
        await upload(media.stub, original, metadata=auth("alice"))
    small = photo(300, 200, seed=40)
    await upload(media.stub, small, metadata=auth("bob"))
    log = EncodeLog(monkeypatch)
    finished: list[str] = []

    async def thumbnail(who: str, original: bytes) -> None:
        await read_thumbnail(
            media, blob_selector(original), media_pb2.THUMBNAIL_SIZE_960, auth(who), deadline=120
        )
        finished.append(who)

    alice = [asyncio.ensure_future(thumbnail("alice", original)) for original in big]
    try:
        deadline = time.monotonic() + 30
        while log.count("handed") < len(big):  # every one of alice's encodes is queued or running
            assert time.monotonic() < deadline, "alice's encodes never reached the encoder"
            await asyncio.sleep(0.005)
        await thumbnail("bob", small)
        bob = hashlib.sha256(small).hexdigest()
        handed_at, started_at = log.index("handed", bob), log.index("started", bob)
        queued_then = len(big) - sum(event == "started" for event, _ in log.events[:handed_at])
        overtaken_by = sum(event == "started" for event, _ in log.events[handed_at:started_at])
        print(f"bob's encode waited for {overtaken_by} of alice's to start, {queued_then} queued")
        assert queued_then >= 3, "alice's queue was gone before bob asked"
        # The next turn is bob's: he waits only for the encode running when he asked.
        assert overtaken_by == 0
        await asyncio.gather(*alice)
        assert finished.count("alice") == len(big)
    finally:
        for future in alice:
            future.cancel()


class Overlap:
    """The most ThumbnailJob.run calls in progress at once (the real method still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()
        real = ThumbnailJob.run

        def run(job: ThumbnailJob) -> Any:
            with self._lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                return real(job)
            finally:
                with self._lock:
                    self.now -= 1

        monkeypatch.setattr(ThumbnailJob, "run", run)


async def test_encodes_wait_for_the_memory_budget_and_one_over_it_runs_alone(
    start_media: StartMedia, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2600 x 2600: 27 MB of RGBA each, reserved before decoding.
    big = [photo(2600, 2600, seed=50 + n) for n in range(4)]
    overlap = Overlap(monkeypatch)
    # The smallest budget, 4 MiB: each encode is over it, so each runs alone, and runs.
    tight = await start_media(thumbnail_threads=2, thumbnail_memory_bytes=4 * 1024 * 1024)
    for original in big:
        await upload(tight.stub, original)
    results = await asyncio.gather(
        *(read_thumbnail(tight, blob_selector(o), media_pb2.THUMBNAIL_SIZE_96) for o in big)
    )
    assert {(m.width, m.height) for m, _ in results} == {(96, 96)}
    assert overlap.most == 1, "two encodes ran at once beyond the budget"
    encodes = tight.server.servicer.instance.thumbnail_encodes if tight.server.servicer else None
    assert encodes is not None and encodes.reserved == 0 and encodes.queued == 0
    # The default budget (512 MiB) holds both threads' encodes: they run together.
    overlap.most = 0
    roomy = await start_media(thumbnail_threads=2, state_dir=tight.state.parent / "state-2")
    for original in big:
        await upload(roomy.stub, original)
    await asyncio.gather(
        *(read_thumbnail(roomy, blob_selector(o), media_pb2.THUMBNAIL_SIZE_96) for o in big)
    )
    assert overlap.most == 2


def peak_rss_kib(pid: int) -> int:
    """The peak resident set size of a process (VmHWM), KiB."""
    return proc_status_kib(pid, "VmHWM")


async def test_two_concurrent_64_mp_thumbnails_stay_within_the_memory_bound(
    tmp_path: Path,
) -> None:
    # One-colour 8000x8000 RGBA PNGs: 64 MP (the limit), 256 MB each decoded whole.
    big = [flat_png(8000, 8000, (10 + n, 200, 30, 255)) for n in range(2)]
    assert all(len(data) < 300_000 for data in big)
    small = flat_png(300, 200, (1, 2, 3, 255))
    root, state = tmp_path / "projects", tmp_path / "state"
    root.mkdir()
    server = ServerProcess("media_service", root, state)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = media_pb2_grpc.MediaServiceStub(channel)
        for data in [*big, small]:
            await upload(stub, data)
        # The encode path loaded and warm: idle is the server as it serves thumbnails.
        await read_thumbnail(stub, blob_selector(small), media_pb2.THUMBNAIL_SIZE_96)
        idle = proc_status_kib(server.pid, "VmRSS")
        results = await asyncio.gather(
            *(read_thumbnail(stub, blob_selector(d), media_pb2.THUMBNAIL_SIZE_96) for d in big)
        )
        growth_mib = (peak_rss_kib(server.pid) - idle) / 1024
        print(f"two 64 MP thumbnails: peak {growth_mib:.0f} MiB over idle")
        assert [(m.width, m.height) for m, _ in results] == [(96, 96), (96, 96)]
        assert growth_mib * 1.048576 < 350, f"peak {growth_mib:.0f} MiB over idle"
    finally:
        await channel.close()
        server.terminate()
