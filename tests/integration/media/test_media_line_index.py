"""Refs without a hint resolve through the persisted line index (issue 16).

A ref rebuilt from its string form carries no offset hint. The media service
finds its line through the line index (scrollback.lineindex), built on first
touch and kept in the state database, so a restarted server finds it without
a search, and StatMedia of 1,000 selectors into one file is 1,000 lookups, no
search pass. A wrong index (rows edited to point elsewhere) never yields
wrong bytes: each indexed line is verified (uuid, pin) and a miss costs a search.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from media_service import transcript_media
from media_service.transcript_media import Candidate, TranscriptMedia
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from scrollback.state.sqlite import database_path
from tests.support.media import (
    MediaEnv,
    StartMedia,
    dumps,
    entry,
    expected_images,
    image_block,
    png_bytes,
    read_media,
    write_transcript,
)


def mint(session_id: str, line: bytes) -> list[ref_pb2.MediaRef]:
    """The refs a window at the smallest inline limit mints (small images, small files)."""
    stripped = strip_line(line, MIN_INLINE_LIMIT)
    assert stripped is not None
    return [
        ref_pb2.MediaRef(
            session_id=session_id, entry_uuid=stripped.uuid, index=image.index, pin=image.pin
        )
        for image in stripped.images
    ]


def image_lines(count: int, size: int = 2000) -> list[bytes]:
    """`count` entries with one small image each, a text line after every one."""
    lines: list[bytes] = []
    for number in range(count):
        lines.append(dumps(entry(f"img-{number}", [image_block(png_bytes(size, number))])))
        lines.append(dumps(entry(f"txt-{number}", [{"type": "text", "text": "hi"}])))
    return lines


def transcripts_of(media: MediaEnv) -> TranscriptMedia:
    assert media.server.library is not None
    return media.server.library.transcripts


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The uuids each single-ref search looked for (the search itself still runs)."""
    calls: list[str] = []
    real = transcript_media.iter_candidate_lines

    def recording(fd: int, entry_uuid: str, max_line_size: int) -> Iterator[Candidate]:
        calls.append(entry_uuid)
        return real(fd, entry_uuid, max_line_size)

    monkeypatch.setattr(transcript_media, "iter_candidate_lines", recording)
    yield calls


def bare(refs: list[ref_pb2.MediaRef]) -> list[media_pb2.MediaSelector]:
    """Selectors as rebuilt from the refs' string form: no hint."""
    return [
        media_pb2.MediaSelector(
            media_ref=ref_pb2.MediaRef(
                session_id=r.session_id, entry_uuid=r.entry_uuid, index=r.index, pin=r.pin
            )
        )
        for r in refs
    ]


async def test_hintless_ref_after_restart_needs_no_search(
    start_media: StartMedia, searches: list[str]
) -> None:
    lines = image_lines(50)
    first = await start_media()
    write_transcript(first.root, "s", lines)
    (ref,) = mint("s", lines[60])
    (selector,) = bare([ref])
    _, data, _ = await read_media(first.stub, selector)
    assert data == expected_images(lines[60])[0]
    assert searches == []  # the index was built on first touch, and answered
    await first.server.stop(0)
    restarted = await start_media()
    index = transcripts_of(restarted).line_index
    assert index is not None
    (other,) = bare(mint("s", lines[80]))
    _, data, _ = await read_media(restarted.stub, other)
    assert data == expected_images(lines[80])[0]
    assert searches == []
    assert index.builds == 0 and index.bytes_read == 0  # read from the state database


async def test_stat_of_1000_selectors_is_no_search_pass(
    start_media: StartMedia, searches: list[str]
) -> None:
    lines = image_lines(1000)
    media = await start_media()
    write_transcript(media.root, "many", lines)
    refs = [ref for line in lines[::2] for ref in mint("many", line)]
    assert len(refs) == 1000
    answer = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert [r.error.code for r in answer.results] == [""] * 1000
    assert transcripts_of(media).search_passes == 0
    await media.server.stop(0)
    restarted = await start_media()
    again = await restarted.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert list(again.results) == list(answer.results)
    assert transcripts_of(restarted).search_passes == 0
    assert searches == []


async def test_a_wrong_index_never_yields_wrong_bytes(
    start_media: StartMedia, searches: list[str]
) -> None:
    lines = image_lines(20)
    media = await start_media()
    write_transcript(media.root, "w", lines)
    refs = [ref for line in lines[::2] for ref in mint("w", line)]
    built = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert transcripts_of(media).search_passes == 0
    await media.server.stop(0)
    # Corrupt the rows: each image entry's uuid now names the next image line,
    # and one row points into the middle of a line.
    with sqlite3.connect(database_path(media.state)) as db:
        db.execute(
            "UPDATE line_index_line SET uuid = 'img-' || ((CAST(substr(uuid, 5) AS INTEGER)"
            " + 1) % 20) WHERE uuid LIKE 'img-%'"
        )
        db.execute("UPDATE line_index_line SET line_offset = line_offset + 7 WHERE uuid = 'img-3'")
    restarted = await start_media()
    for number in (0, 4, 19):
        (selector,) = bare(mint("w", lines[2 * number]))
        _, data, _ = await read_media(restarted.stub, selector)
        assert data == expected_images(lines[2 * number])[0]
    assert len(searches) == 3  # each wrong row cost a search, not wrong bytes
    answer = await restarted.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert list(answer.results) == list(built.results)
    assert transcripts_of(restarted).search_passes == 1
