"""ReadMedia / StatMedia for transcript image refs, end to end over gRPC."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import grpc
import pytest

from scrollback.media.v1 import media_pb2
from tests.support.media import (
    MediaEnv,
    StartMedia,
    dumps,
    entry,
    expected_images,
    image_block,
    mint,
    png_bytes,
    read_error,
    read_media,
    transcript_selector,
    write_transcript,
)

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "iansherr__claude-code-log"
PIN0 = "0" * 32


def corpus_files_with_images() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*.jsonl") if b'"type":"image"' in p.read_bytes())


async def test_corpus_images_resolve_byte_exact(media: MediaEnv) -> None:
    files = corpus_files_with_images()
    assert len(files) >= 4, "the corpus files with images are missing"
    resolved = 0
    for number, source in enumerate(files):
        target = media.root / "corpus-project" / f"corpus-{number}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    for number, source in enumerate(files):
        session_id = f"corpus-{number}"
        for line in source.read_bytes().splitlines():
            if b'"image"' not in line:
                continue
            expected = expected_images(line)
            for ref in mint(session_id, line):
                metadata, data, chunks = await read_media(
                    media.stub, media_pb2.MediaSelector(media_ref=ref)
                )
                assert data == expected[ref.index]
                assert metadata.size_bytes == len(data)
                assert metadata.sha256 == hashlib.sha256(data).hexdigest()
                assert metadata.pin == ref.pin
                assert all(size <= 64 * 1024 for size in chunks)
                resolved += 1
    assert resolved >= 5


def generated_lines() -> tuple[list[bytes], dict[str, list[bytes]]]:
    """A transcript of tricky shapes; returns the lines and the images of each uuid."""
    a, b, c, d, e = (png_bytes(40_000 + i * 1000, seed=i) for i in range(5))
    two = entry("u-two", [image_block(a), {"type": "text", "text": "two"}, image_block(b)])
    nested = entry(
        "u-nested",
        [
            {"type": "text", "text": "before"},
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "shot"}, image_block(c)],
            },
            image_block(d),
        ],
        toolUseResult={"file": {"base64": image_block(c)["source"]["data"], "type": "image"}},
    )
    spaced = entry("u-spaced", [image_block(e, "image/jpeg")], parentUuid="u-two")
    failed = entry("u-failed", [image_block(b""), image_block(a)])
    lines = [
        dumps({"type": "summary", "summary": "s", "leafUuid": "u-two"}),
        dumps(two),
        dumps(nested),
        dumps(spaced, spaced=True),
        dumps(failed),
    ]
    return lines, {"u-two": [a, b], "u-nested": [c, d], "u-spaced": [e], "u-failed": [a]}


async def test_generated_shapes_resolve_byte_exact(media: MediaEnv) -> None:
    lines, _ = generated_lines()
    write_transcript(media.root, "gen", lines)
    count = 0
    for line in lines:
        expected = expected_images(line)
        for ref in mint("gen", line):
            metadata, data, _ = await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
            assert data == expected[ref.index]
            assert metadata.content_type == "image/png"
            assert metadata.safe_inline
            count += 1
    assert count == 6  # 2 + 2 + 1 + 1 (the failed upload has none)
    # a second read of the same transcript is served from the remembered lines
    assert media.server.library is not None
    assert media.server.library.transcripts.lookups.lines() == count


async def test_declared_type_is_never_trusted(media: MediaEnv) -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script>' + b" " * 40_000
    html = b"<!doctype html><html><body>" + b"x" * 40_000 + b"</body></html>"
    lines = [dumps(entry("u-svg", [image_block(svg), image_block(html)]))]
    write_transcript(media.root, "evil", lines)
    for ref, payload in zip(mint("evil", lines[0]), (svg, html), strict=True):
        metadata, data, _ = await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
        assert data == payload
        assert metadata.declared_media_type == "image/png"
        assert metadata.content_type == "application/octet-stream"
        assert not metadata.safe_inline


async def test_rewritten_line_is_failed_precondition(media: MediaEnv) -> None:
    original = dumps(entry("u-1", [image_block(png_bytes(40_000, 1))]))
    path = write_transcript(media.root, "rw", [original])
    (ref,) = mint("rw", original)
    await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))  # cached now
    rewritten = dumps(entry("u-1", [image_block(png_bytes(40_000, 2))]))
    path.write_bytes(rewritten + b"\n")
    error = await read_error(media.stub, media_pb2.MediaSelector(media_ref=ref))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    # the image replaced by text: the index no longer has a cut payload
    path.write_bytes(dumps(entry("u-1", [{"type": "image", "source": {"data": "AAAA"}}])) + b"\n")
    error = await read_error(media.stub, media_pb2.MediaSelector(media_ref=ref))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_entry_found_after_lines_are_prepended_and_appended(media: MediaEnv) -> None:
    line = dumps(entry("u-move", [image_block(png_bytes(40_000, 3))]))
    path = write_transcript(media.root, "mv", [line])
    (ref,) = mint("mv", line)
    await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
    # rewritten in place with other lines before it: the cached offset is stale
    filler = dumps(entry("other", [{"type": "text", "text": "x" * 5000}]))
    rewritten = filler + b"\n" + line + b"\n" + filler + b"\n"
    assert len(rewritten) > path.stat().st_size
    path.write_bytes(rewritten)  # truncates and rewrites the same inode
    _, data, _ = await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
    assert data == expected_images(line)[0]


BAD_IDS = ["..", "../etc", "a/b", "/etc/passwd", "a\x00b", "x" * 10_000, "", ".", "a b", "ü"]


async def test_traversal_attempts_are_invalid_argument(media: MediaEnv, tmp_path: Path) -> None:
    line = dumps(entry("u-ok", [image_block(png_bytes(40_000, 4))]))
    write_transcript(media.root, "ok", [line])
    (ref,) = mint("ok", line)
    for bad in BAD_IDS:
        for field in ("session_id", "entry_uuid"):
            selector = media_pb2.MediaSelector(media_ref=ref)
            setattr(selector.media_ref, field, bad)
            error = await read_error(media.stub, selector)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, bad[:20])
            assert str(tmp_path) not in (error.details() or "")
            assert bad not in (error.details() or "") or bad in ("", ".")
    for pin in ("", "X" * 32, "0" * 31, "../" * 11, "0" * 64):
        error = await read_error(media.stub, transcript_selector("ok", "u-ok", 0, pin))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = await read_error(media.stub, transcript_selector("ok", "u-ok", 10_000, ref.pin))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    for blob_ref in ("media:../../x", "media:" + "A" * 64, "/etc/passwd", "media:" + "0" * 63, ""):
        error = await read_error(media.stub, media_pb2.MediaSelector(blob_ref=blob_ref))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = await read_error(media.stub, media_pb2.MediaSelector())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_symlink_out_of_root_is_not_found(media: MediaEnv, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    line = dumps(entry("u-out", [image_block(png_bytes(40_000, 5))]))
    (outside / "secret.jsonl").write_bytes(line + b"\n")
    (media.root / "proj").mkdir(parents=True, exist_ok=True)
    os.symlink(outside / "secret.jsonl", media.root / "proj" / "secret.jsonl")
    outside_dir = tmp_path / "outside-dir"
    outside_dir.mkdir()
    (outside_dir / "other.jsonl").write_bytes(line + b"\n")
    os.symlink(outside_dir, media.root / "linked-project")
    for session_id in ("secret", "other"):
        (ref,) = mint(session_id, line)
        error = await read_error(media.stub, media_pb2.MediaSelector(media_ref=ref))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert str(tmp_path) not in (error.details() or "")


async def test_not_found_is_one_answer(media: MediaEnv, tmp_path: Path) -> None:
    image = image_block(png_bytes(40_000, 6))
    target = dumps(entry("u-target", [image]))
    lines = [
        # an image-carrying line without uuid, whose leafUuid / parentUuid name the target id
        dumps(entry(None, [image], leafUuid="u-ghost", parentUuid="u-parent")),
        # the id only in text, and as a nested object's "uuid" key
        dumps(entry("u-text", [{"type": "text", "text": '"uuid":"u-ghost2" {"uuid":"u-ghost2"}'}])),
        dumps(entry("u-nest", [image], toolUseResult={"uuid": "u-nested-only"})),
        target,
        dumps(entry("u-failed", [image_block(b"")])),
    ]
    write_transcript(media.root, "nf", lines)
    (ref,) = mint("nf", target)
    pin = ref.pin
    cases = [
        ("nope", "u-target", 0),  # unknown session
        ("nf", "u-unknown", 0),  # unknown entry
        ("nf", "u-target", 1),  # past the images
        ("nf", "u-failed", 0),  # failed upload
        ("nf", "u-ghost", 0),  # only a leafUuid
        ("nf", "u-parent", 0),  # only a parentUuid
        ("nf", "u-ghost2", 0),  # only in text
        ("nf", "u-nested-only", 0),  # only a nested object's uuid key
    ]
    messages = set()
    for session_id, entry_uuid, index in cases:
        error = await read_error(
            media.stub, transcript_selector(session_id, entry_uuid, index, pin)
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND, (session_id, entry_uuid, index)
        messages.add(error.details())
    assert len(messages) == 1
    assert str(tmp_path) not in messages.pop()


async def test_line_without_newline_and_crlf(media: MediaEnv) -> None:
    first = dumps(entry("u-crlf", [image_block(png_bytes(40_000, 7))]))
    last = dumps(entry("u-last", [image_block(png_bytes(40_000, 8))]))
    path = media.root / "proj" / "tail.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(first + b"\r\n" + last)  # no final newline
    for line in (first, last):
        (ref,) = mint("tail", line)
        _, data, _ = await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
        assert data == expected_images(line)[0]
    # a half-written last line is not served
    path.write_bytes(first + b"\n" + last[:-10])
    (ref,) = mint("tail", last)
    error = await read_error(media.stub, media_pb2.MediaSelector(media_ref=ref))
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_lines_over_the_max_line_size(start_media: StartMedia) -> None:
    env = await start_media(max_line_size=64 * 1024)
    small = dumps(entry("u-small", [image_block(png_bytes(40_000, 9))]))
    # Over the max line size because of its image: found by streaming the line.
    big = dumps(entry("u-big", [image_block(png_bytes(100_000, 10))]))
    # Still over it without its image: the history service stubs it, so the
    # media service has nothing to serve either.
    prose = "word " * 20_000
    huge = dumps(
        entry("u-huge", [{"type": "text", "text": prose}, image_block(png_bytes(40_000, 12))])
    )
    write_transcript(env.root, "big", [big, huge, small])
    (ref,) = mint("big", big)
    _, data, _ = await read_media(env.stub, media_pb2.MediaSelector(media_ref=ref))
    assert data == expected_images(big)[0]
    (ref,) = mint("big", huge)
    error = await read_error(env.stub, media_pb2.MediaSelector(media_ref=ref))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    (ref,) = mint("big", small)
    _, data, _ = await read_media(env.stub, media_pb2.MediaSelector(media_ref=ref))
    assert data == expected_images(small)[0]


async def test_a_ref_in_a_line_over_16_mib_resolves(start_media: StartMedia) -> None:
    env = await start_media()  # the default max line size: 16 MiB
    payload = png_bytes(13_000_000, -1)
    line = dumps(entry("u-huge-photo", [image_block(payload)]))
    assert len(line) > 16 * 1024 * 1024
    write_transcript(env.root, "huge", [line])
    (ref,) = mint("huge", line)
    metadata, data, _ = await read_media(env.stub, media_pb2.MediaSelector(media_ref=ref))
    assert data == payload and metadata.size_bytes == len(payload)


async def test_range_reads(start_media: StartMedia) -> None:
    env = await start_media(chunk_size=10_000)
    payload = png_bytes(45_001, 11)
    line = dumps(entry("u-range", [image_block(payload)]))
    write_transcript(env.root, "range", [line])
    (ref,) = mint("range", line)
    selector = media_pb2.MediaSelector(media_ref=ref)
    size = len(payload)
    _, data, chunks = await read_media(env.stub, selector)
    assert data == payload and max(chunks) == 10_000 and len(chunks) == 5
    for offset, limit, expected in [
        (0, 0, payload),
        (0, 1, payload[:1]),
        (size - 1, 0, payload[-1:]),
        (size - 1, 100, payload[-1:]),
        (size, 0, b""),
        (size, 5, b""),
        (100, 20_000, payload[100:20_100]),
        (100, size * 2, payload[100:]),
    ]:
        metadata, data, _ = await read_media(env.stub, selector, offset, limit)
        assert data == expected, (offset, limit)
        assert metadata.size_bytes == size
    for offset, limit in [(size + 1, 0), (-1, 0), (0, -1), (2**62, 0)]:
        error = await read_error(env.stub, selector, offset, limit)
        assert error.code() == grpc.StatusCode.OUT_OF_RANGE, (offset, limit)


async def test_stat_media_batch(media: MediaEnv, tmp_path: Path) -> None:
    lines, _ = generated_lines()
    write_transcript(media.root, "stat", lines)
    refs = [ref for line in lines for ref in mint("stat", line)]
    selectors = [media_pb2.MediaSelector(media_ref=r) for r in refs]
    selectors += [
        transcript_selector("stat", "u-two", 7, refs[0].pin),
        transcript_selector("stat", "u-two", 0, PIN0),
        transcript_selector("..", "u-two", 0, PIN0),
        media_pb2.MediaSelector(blob_ref="media:" + "a" * 64),
    ]
    response = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=selectors))
    assert len(response.results) == len(selectors)
    for ref, result in zip(refs, response.results, strict=False):
        assert result.WhichOneof("result") == "metadata"
        assert result.metadata.pin == ref.pin and result.metadata.size_bytes > 0
    codes = [r.error.code for r in response.results[len(refs) :]]
    assert codes == ["NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT", "NOT_FOUND"]
    assert all(str(tmp_path) not in r.error.message for r in response.results)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await media.stub.StatMedia(media_pb2.StatMediaRequest(media=selectors[:1] * 1001))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_ambiguous_session_is_failed_precondition(media: MediaEnv) -> None:
    line = dumps(entry("u-amb", [image_block(png_bytes(40_000, 12))]))
    write_transcript(media.root, "twin", [line], project="p1")
    write_transcript(media.root, "twin", [line], project="p2")
    (ref,) = mint("twin", line)
    error = await read_error(media.stub, media_pb2.MediaSelector(media_ref=ref))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_undecodable_payload_is_data_loss(media: MediaEnv) -> None:
    # base64 alphabet, but not valid base64 (a lone trailing character)
    bad = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 40_001},
    }
    line = dumps(entry("u-bad", [bad]))
    write_transcript(media.root, "bad", [line])
    refs = mint("bad", line)
    if not refs:
        pytest.skip("strip_line does not cut this payload")
    error = await read_error(media.stub, media_pb2.MediaSelector(media_ref=refs[0]))
    assert error.code() == grpc.StatusCode.DATA_LOSS
    assert re.search(r"[A]{100}", error.details() or "") is None


def test_generated_lines_are_valid_json() -> None:
    lines, _ = generated_lines()
    for line in lines:
        json.loads(line)
