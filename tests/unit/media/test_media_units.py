"""Unit tests of the media service's domain modules: sniffing, ranges, config,
the chunked entry-line search, hydration and upload failure paths."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from media_service import uuid_scan
from media_service.blob_paths import BlobPaths
from media_service.blobs import BlobStore
from media_service.config import MediaConfig
from media_service.errors import ReadRangeError, StorageFullError
from media_service.hydrate import hydrate_attachment
from media_service.ranges import byte_range
from media_service.store.sqlite import SqliteBlobMetadataStore
from media_service.uuid_scan import iter_candidate_lines
from scrollback.contract.sniff import sniff
from scrollback.linefile import LocalSource
from scrollback.server.service_config import ConfigError


def ftyp(major: bytes, *compatible: bytes) -> bytes:
    body = major + b"\x00\x00\x00\x00" + b"".join(compatible)
    return (8 + len(body)).to_bytes(4, "big") + b"ftyp" + body + b"\x00" * 32


@pytest.mark.parametrize(
    ("head", "content_type"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "image/png"),
        (b"\xff\xd8\xff\xe0" + b"\x00" * 20, "image/jpeg"),
        (b"GIF89a" + b"\x00" * 20, "image/gif"),
        (b"GIF87a" + b"\x00" * 20, "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (ftyp(b"avif", b"mif1", b"miaf"), "image/avif"),
        (ftyp(b"avis"), "image/avif"),
        (ftyp(b"heic", b"mif1"), "image/heic"),
        (ftyp(b"mif1", b"heic"), "image/heic"),
        (ftyp(b"msf1"), "image/heic"),
        (ftyp(b"mif1", b"avif"), "image/avif"),
    ],
)
def test_sniff_images(head: bytes, content_type: str) -> None:
    sniffed = sniff(head)
    assert sniffed.content_type == content_type and sniffed.safe_inline


@pytest.mark.parametrize(
    "head",
    [
        b'<svg xmlns="http://www.w3.org/2000/svg">',
        b'<?xml version="1.0"?><svg>',
        b"<!DOCTYPE html><html>",
        b"<html><script>",
        b"%PDF-1.7",
        b"RIFF\x10\x00\x00\x00WAVEfmt ",
        ftyp(b"isom", b"mp41"),
        b"",
        b"\x89PN",
    ],
)
def test_sniff_everything_else_is_opaque(head: bytes) -> None:
    sniffed = sniff(head)
    assert sniffed.content_type == "application/octet-stream" and not sniffed.safe_inline


def test_byte_range() -> None:
    assert byte_range(10, 0, 0) == (0, 10)
    assert byte_range(10, 9, 0) == (9, 10)
    assert byte_range(10, 10, 0) == (10, 10)
    assert byte_range(10, 2, 3) == (2, 5)
    assert byte_range(10, 2, 100) == (2, 10)
    assert byte_range(0, 0, 0) == (0, 0)
    for offset, limit in [(11, 0), (-1, 0), (0, -1)]:
        with pytest.raises(ReadRangeError):
            byte_range(10, offset, limit)


def test_config_from_env_and_validation() -> None:
    config = MediaConfig.from_env(
        {
            "SCROLLBACK_TRANSCRIPTS": "/t",
            "SCROLLBACK_STATE": "/s",
            "SCROLLBACK_MEDIA_ADDR": "127.0.0.1:1",
            "SCROLLBACK_MEDIA_CHUNK_SIZE": "1000",
        }
    )
    assert config.transcripts == Path("/t") and config.state_dir == Path("/s")
    assert config.addr == "127.0.0.1:1" and config.chunk_size == 1000
    defaults = MediaConfig.from_env({})
    assert defaults.addr == "127.0.0.1:50052" and defaults.chunk_size == 64 * 1024
    assert defaults.max_blob_size == 64 * 1024 * 1024 and defaults.gc_grace_seconds == 3600
    for env in (
        {"SCROLLBACK_MEDIA_CHUNK_SIZE": str(256 * 1024 + 1)},
        {"SCROLLBACK_MEDIA_CHUNK_SIZE": "0"},
        {"SCROLLBACK_MEDIA_CHUNK_SIZE": "lots"},
        {"SCROLLBACK_GC_GRACE_SECONDS": "-1"},
        {"SCROLLBACK_GC_INTERVAL_SECONDS": "0"},
        {"SCROLLBACK_MEDIA_ADDR": "nohost"},
    ):
        with pytest.raises(ConfigError):
            MediaConfig.from_env(env)


UUIDS = ["u1", "u2", "u-target"]


@st.composite
def transcripts(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Lines, some with the target as the top-level uuid (compact or spaced), some
    holding it elsewhere; returns the file and the start offsets of the true lines."""
    data = b""
    starts: list[int] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["top", "top-spaced", "parent", "text", "nested", "other"]))
        pad = "x" * draw(st.integers(0, 80))
        value: dict[str, object] = {"type": "user", "pad": pad}
        if kind in ("top", "top-spaced"):
            value["uuid"] = "u-target"
        elif kind == "parent":
            value |= {"uuid": "u1", "parentUuid": "u-target"}
        elif kind == "text":
            value |= {"uuid": "u2", "text": '"uuid":"u-target"'}
        elif kind == "nested":
            value |= {"uuid": "u2", "toolUseResult": {"uuid": "u-target"}}
        if draw(st.booleans()):
            value = {"pad2": pad, **value}
        line = (
            json.dumps(value).encode()
            if kind == "top-spaced"
            else json.dumps(value, separators=(",", ":")).encode()
        )
        if kind in ("top", "top-spaced"):
            starts.append(len(data))
        data += line + b"\n"
    return data, starts


@given(transcripts(), st.integers(1, 64))
def test_candidate_search_across_chunk_boundaries(
    case: tuple[bytes, list[int]], chunk: int
) -> None:
    data, starts = case
    original = uuid_scan.SCAN_CHUNK
    uuid_scan.SCAN_CHUNK = chunk
    fd, name = tempfile.mkstemp()
    try:
        os.write(fd, data)
        found = list(iter_candidate_lines(LocalSource(fd), "u-target", 10_000))
    finally:
        uuid_scan.SCAN_CHUNK = original
        os.close(fd)
        os.unlink(name)
    # every true line is a candidate, and the nested key is the only false one
    true_found = [
        c.start
        for c in found
        if c.line is not None and json.loads(c.line).get("uuid") == "u-target"
    ]
    assert true_found == starts
    for candidate in found:
        assert candidate.line is not None
        assert data[candidate.start : candidate.start + len(candidate.line)] == candidate.line
        assert candidate.start == 0 or data[candidate.start - 1 : candidate.start] == b"\n"
        assert b"u-target" in candidate.line


def test_candidate_search_skips_oversize_lines(tmp_path: Path) -> None:
    big = b'{"uuid":"u-target","pad":"' + b"x" * 5000 + b'"}'
    small = b'{"uuid":"u-target"}'
    path = tmp_path / "t.jsonl"
    path.write_bytes(big + b"\n" + small + b"\n")
    with open(path, "rb") as handle:
        found = list(iter_candidate_lines(LocalSource(handle.fileno()), "u-target", 1024))
    assert [(c.start, c.line) for c in found] == [(0, None), (len(big) + 1, small)]


def make_store(state: Path, **kwargs: object) -> BlobStore:
    return BlobStore(
        BlobPaths(state),
        SqliteBlobMetadataStore(state),
        max_blob_size=1 << 20,
        **kwargs,  # type: ignore[arg-type]
    )


def test_hydrate_attachment(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    data = b"\x89PNG\r\n\x1a\n attachment"
    written = store.write_bytes(None, data, "image/png")
    assert hydrate_attachment(store, written.ref, "a.png", "image/png") == data
    missing = "media:" + hashlib.sha256(b"gone").hexdigest()
    assert (
        hydrate_attachment(store, missing, "b.png", "image/png")
        == "[media unavailable: b.png (image/png)]"
    )
    assert (
        hydrate_attachment(store, "../etc", "c.txt", "text/plain")
        == "[media unavailable: c.txt (text/plain)]"
    )
    os.unlink(store.paths.blob(written.ref.removeprefix("media:")))
    assert hydrate_attachment(store, written.ref, "a.png", "image/png").startswith(
        "[media unavailable"
    )


def test_enospc_is_storage_full_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path)
    data = b"bytes" * 100
    upload = store.begin_upload(None, hashlib.sha256(data).hexdigest(), len(data), "")
    upload.write(data)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageFullError):
        upload.finish()
    monkeypatch.undo()
    assert store.paths.temp_files() == []
    assert store.find_missing([hashlib.sha256(data).hexdigest()]) == [
        hashlib.sha256(data).hexdigest()
    ]


def test_blob_paths_are_sharded_and_validated(tmp_path: Path) -> None:
    paths = BlobPaths(tmp_path)
    sha = hashlib.sha256(b"x").hexdigest()
    assert paths.blob(sha) == tmp_path / "blobs" / sha[:2] / sha[2:4] / sha
    for bad in ("../" + sha[3:], sha.upper(), sha + "/..", "", "a" * 63):
        with pytest.raises(ValueError):
            paths.blob(bad)


@pytest.mark.parametrize("name", ["THUMBNAIL_THREADS", "SEARCH_THREADS"])
def test_thread_counts_from_env_and_bounds(name: str) -> None:
    field = name.lower()
    assert getattr(MediaConfig.from_env({}), field) == 2
    assert getattr(MediaConfig.from_env({f"SCROLLBACK_MEDIA_{name}": "4"}), field) == 4
    for value in ("0", "65", "many"):
        with pytest.raises(ConfigError):
            MediaConfig.from_env({f"SCROLLBACK_MEDIA_{name}": value})


def test_thumbnail_memory_bytes_from_env_and_bounds() -> None:
    assert MediaConfig.from_env({}).thumbnail_memory_bytes == 512 * 1024 * 1024
    config = MediaConfig.from_env({"SCROLLBACK_MEDIA_THUMBNAIL_MEMORY_BYTES": "104857600"})
    assert config.thumbnail_memory_bytes == 104857600
    for value in ("0", str(1024 * 1024), str(65 * 1024**3), "plenty"):
        with pytest.raises(ConfigError):
            MediaConfig.from_env({"SCROLLBACK_MEDIA_THUMBNAIL_MEMORY_BYTES": value})


def test_decoded_cache_bytes_from_env_and_bounds() -> None:
    assert MediaConfig.from_env({}).decoded_cache_bytes == 64 * 1024 * 1024
    config = MediaConfig.from_env({"SCROLLBACK_MEDIA_DECODED_CACHE_BYTES": "0"})
    assert config.decoded_cache_bytes == 0  # off
    config = MediaConfig.from_env({"SCROLLBACK_MEDIA_DECODED_CACHE_BYTES": "1048576"})
    assert config.decoded_cache_bytes == 1048576
    for value in ("-1", str(4097 * 1024 * 1024), "lots"):
        with pytest.raises(ConfigError):
            MediaConfig.from_env({"SCROLLBACK_MEDIA_DECODED_CACHE_BYTES": value})


def test_decoded_cache_evicts_least_recently_used_by_bytes() -> None:
    from media_service.decoded import DecodedCache, DecodedImage

    cache = DecodedCache(300, max_item_bytes=200)
    images = {name: DecodedImage(100, 64, []) for name in "abc"}
    refs = {name: cache.put((0, 0, ord(name), name), image) for name, image in images.items()}
    assert cache.get((0, 0, ord("a"), "a")) is not None  # a is now the most recent
    cache.put((0, 0, ord("d"), "d"), DecodedImage(150, 64, []))  # evicts b, then c
    assert cache.get((0, 0, ord("b"), "b")) is None
    assert cache.get((0, 0, ord("c"), "c")) is None
    assert cache.get((0, 0, ord("a"), "a")) is not None
    assert cache.total_bytes == 250
    assert cache.put((0, 0, 9, "big"), DecodedImage(201, 64, [])) is None  # over the item bound
    assert not DecodedCache(0).holds(1)  # off
    del images
    held = refs["b"]
    assert held is not None and held() is None  # evicted and not held elsewhere: freed
    assert refs["a"] is not None and refs["a"]() is not None


def test_decoded_cache_fills_one_stream_per_key_within_its_budget() -> None:
    from media_service.decoded import DecodedCache, Encoded

    cache = DecodedCache(300, max_item_bytes=200)
    filler = cache.begin_fill((0, 0, 1, "a"), 150, 100)
    assert filler is not None
    assert cache.begin_fill((0, 0, 1, "a"), 150, 100) is None  # one filler per key
    assert cache.begin_fill((0, 0, 2, "b"), 160, 100) is None  # 150 + 160 over the budget
    other = cache.begin_fill((0, 0, 3, "c"), 150, 100)
    assert other is not None
    other.abandon()  # nothing cached, its reservation freed
    assert cache.get((0, 0, 3, "c")) is None
    filler.add(Encoded(b"x" * 100))
    filler.add(Encoded(b"y" * 50))
    filler.finish()
    held = cache.get((0, 0, 1, "a"))
    assert held is not None
    image = held()
    assert image is not None and image.size == 150 and len(image.chunks) == 2
    short = cache.begin_fill((0, 0, 4, "d"), 100, 100)
    assert short is not None
    short.add(Encoded(b"z" * 40))
    short.finish()  # fewer bytes than the image: not cached
    assert cache.get((0, 0, 4, "d")) is None
    assert cache.begin_fill((0, 0, 5, "e"), 150, 100) is not None  # all reservations freed
