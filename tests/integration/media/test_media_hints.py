"""ReadMedia / StatMedia with `MediaRef.line_offset_hint`: a right hint is used,
a wrong one only ever costs a search (never an error or a wrong answer)."""

from __future__ import annotations

import grpc
import pytest

from media_service import entry_locator
from scrollback.linefile import LineFile
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
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
    write_transcript,
)


def offsets(lines: list[bytes]) -> list[int]:
    """The byte offset of each line of a transcript written by write_transcript."""
    found: list[int] = []
    position = 0
    for line in lines:
        found.append(position)
        position += len(line) + 1
    return found


def hinted(ref: ref_pb2.MediaRef, hint: int) -> media_pb2.MediaSelector:
    copy = ref_pb2.MediaRef()
    copy.CopyFrom(ref)
    copy.line_offset_hint = hint
    return media_pb2.MediaSelector(media_ref=copy)


def fixture_lines() -> list[bytes]:
    return [
        dumps(entry("u-first", [image_block(png_bytes(40_000, 1))])),
        dumps(entry("u-dup", [image_block(png_bytes(40_000, 2))])),
        dumps(entry("u-other", [{"type": "text", "text": "x" * 3000}], parentUuid="u-target")),
        dumps(entry("u-dup", [image_block(png_bytes(40_000, 3))])),
        dumps(entry("u-target", [image_block(png_bytes(40_000, 4))]), spaced=True),
        dumps(entry("u-last", [image_block(png_bytes(40_000, 5))])),
    ]


async def test_right_hint_skips_the_search(
    media: MediaEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = fixture_lines()
    write_transcript(media.root, "h", lines)
    starts = offsets(lines)

    def no_search(*_args: object) -> object:
        raise AssertionError("the line was searched for despite a right hint")

    monkeypatch.setattr(entry_locator, "iter_candidate_lines", no_search)
    for number, line in enumerate(lines):
        for ref in mint("h", line):
            selector = hinted(ref, starts[number])
            _, data, _ = await read_media(media.stub, selector)
            assert data == expected_images(line)[ref.index]
            stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[selector]))
            assert stat.results[0].metadata.pin == ref.pin


async def test_wrong_hints_still_give_the_right_bytes(media: MediaEnv) -> None:
    lines = fixture_lines()
    path = write_transcript(media.root, "w", lines)
    starts = offsets(lines)
    size = path.stat().st_size
    (target,) = mint("w", lines[4])
    (second_dup,) = mint("w", lines[3])
    wrong = [
        0,  # another entry's line
        starts[2],  # the line naming the target as its parentUuid
        starts[4] + 1,  # the middle of the right line
        starts[4] - 1,  # the newline before it
        starts[5] + 17,  # the middle of another line
        size - 1,  # the final newline
        size,  # EOF
        size + 12345,  # past EOF
        2**63 - 1,
        2**64 - 1,  # the largest uint64
    ]
    for hint in wrong:
        for ref, line in ((target, lines[4]), (second_dup, lines[3])):
            # fresh server state for each: no cached offset to fall back on
            media.server.library.transcripts.lookups.clear()  # type: ignore[union-attr]
            _, data, _ = await read_media(media.stub, hinted(ref, hint))
            assert data == expected_images(line)[0], hint
    # a line with the same uuid but another pin: the other u-dup line is found
    media.server.library.transcripts.lookups.clear()  # type: ignore[union-attr]
    _, data, _ = await read_media(media.stub, hinted(second_dup, starts[1]))
    assert data == expected_images(lines[3])[0]
    (first_dup,) = mint("w", lines[1])
    _, data, _ = await read_media(media.stub, hinted(first_dup, starts[3]))
    assert data == expected_images(lines[1])[0]


async def test_wrong_hints_still_give_the_right_errors(media: MediaEnv) -> None:
    lines = fixture_lines()
    write_transcript(media.root, "e", lines)
    starts = offsets(lines)
    (target,) = mint("e", lines[4])
    bad_pin = ref_pb2.MediaRef()
    bad_pin.CopyFrom(target)
    bad_pin.pin = "0" * 32
    for hint in (starts[4], starts[0], starts[4] + 5, 10**12):
        error = await read_error(media.stub, hinted(bad_pin, hint))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, hint
    missing = ref_pb2.MediaRef()
    missing.CopyFrom(target)
    missing.entry_uuid = "u-nowhere"
    for hint in (starts[4], 0):
        error = await read_error(media.stub, hinted(missing, hint))
        assert error.code() == grpc.StatusCode.NOT_FOUND
    past = ref_pb2.MediaRef()
    past.CopyFrom(target)
    past.index = 1
    error = await read_error(media.stub, hinted(past, starts[4]))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    stat = await media.stub.StatMedia(
        media_pb2.StatMediaRequest(
            media=[hinted(bad_pin, starts[4]), hinted(missing, starts[4]), hinted(target, 3)]
        )
    )
    assert [r.error.code for r in stat.results[:2]] == ["FAILED_PRECONDITION", "NOT_FOUND"]
    assert stat.results[2].metadata.pin == target.pin


async def test_stale_hint_after_the_file_is_rewritten(media: MediaEnv) -> None:
    line = dumps(entry("u-move", [image_block(png_bytes(40_000, 6))]))
    path = write_transcript(media.root, "mv", [line])
    (ref,) = mint("mv", line)
    _, data, _ = await read_media(media.stub, hinted(ref, 0))
    filler = dumps(entry("other", [{"type": "text", "text": "y" * 5000}]))
    path.write_bytes(filler + b"\n" + line + b"\n")
    _, moved, _ = await read_media(media.stub, hinted(ref, 0))
    assert moved == data == expected_images(line)[0]
    # the image rewritten at the hinted offset: the old pin no longer serves
    rewritten = dumps(entry("u-move", [image_block(png_bytes(40_000, 7))]))
    path.write_bytes(filler + b"\n" + rewritten + b"\n")
    error = await read_error(media.stub, hinted(ref, len(filler) + 1))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_hint_at_an_oversize_line_falls_back(start_media: StartMedia) -> None:
    env = await start_media(max_line_size=64 * 1024)
    big = dumps(entry("u-big", [image_block(png_bytes(100_000, 8))]))
    small = dumps(entry("u-small", [image_block(png_bytes(40_000, 9))]))
    write_transcript(env.root, "big", [big, small])
    (ref,) = mint("big", small)
    _, data, _ = await read_media(env.stub, hinted(ref, 0))
    assert data == expected_images(small)[0]
    (ref,) = mint("big", big)
    # The line is over the max line size, but its image is found by streaming it.
    _, data, _ = await read_media(env.stub, hinted(ref, 0))
    assert data == expected_images(big)[0]


async def test_stat_uses_the_metadata_cache_and_matches_read(media: MediaEnv) -> None:
    lines = fixture_lines()
    write_transcript(media.root, "s", lines)
    refs = [ref for line in lines for ref in mint("s", line)]
    selectors = [media_pb2.MediaSelector(media_ref=ref) for ref in refs]
    cold = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=selectors))
    assert media.server.library is not None
    assert media.server.library.transcripts.lookups.infos() == len(refs)
    for selector, result in zip(selectors, cold.results, strict=True):
        metadata, data, _ = await read_media(media.stub, selector)
        assert result.metadata == metadata
        assert metadata.size_bytes == len(data)
    warm = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=selectors))
    assert list(warm.results) == list(cold.results)


async def test_a_ref_without_hint_never_reads_offset_zero(
    media: MediaEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = fixture_lines()
    write_transcript(media.root, "nh", lines)
    starts = offsets(lines)
    hinted_reads: list[int] = []
    real_line_from = LineFile.line_from

    def recording_line_from(file: LineFile, start: int, max_line: int) -> bytes | None:
        hinted_reads.append(start)
        return real_line_from(file, start, max_line)

    monkeypatch.setattr(LineFile, "line_from", recording_line_from)
    (last,) = mint("nh", lines[5])
    bare = media_pb2.MediaSelector(media_ref=last)
    assert not bare.media_ref.HasField("line_offset_hint")
    for _ in range(2):  # cold (searched) then warm (cached offset)
        _, data, _ = await read_media(media.stub, bare)
        assert data == expected_images(lines[5])[0]
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[bare]))
    assert stat.results[0].metadata.pin == last.pin
    assert hinted_reads == [], "an absent hint was read as an offset"
    # a hint of 0 that is present is still a hint (the first line)
    (first,) = mint("nh", lines[0])
    _, data, _ = await read_media(media.stub, hinted(first, 0))
    assert data == expected_images(lines[0])[0]
    assert hinted_reads == [starts[0]]
