"""Refs without a hint resolve through the persisted line index (issue 16).

A ref rebuilt from its string form carries no offset hint. The media service
finds its line through the line index (scrollback.lineindex), kept in the
state database, so a restarted server finds it without a search, and StatMedia
of 1,000 selectors into one file is 1,000 lookups, no search pass. The first
touch of a file never waits for its index: it is answered by a search from the
start (O(the entry's position)) while the index is built in the background,
and a lookup returns while that build is still held back. A wrong index (rows
edited to point elsewhere) never yields wrong bytes: each indexed line is
verified (uuid, pin) and a miss costs a search.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from media_service import entry_locator
from media_service.blobs import MediaInfo
from media_service.transcript_media import TranscriptMedia
from media_service.uuid_scan import Candidate
from scrollback.contract.refs import TranscriptImageRef
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line
from scrollback.directory import DirectoryRoot
from scrollback.lineindex import LineIndex
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from scrollback.state.line_index import IndexedFile, IndexedLine
from scrollback.state.line_index_sqlite import SqliteLineIndexStore
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
from tests.support.security import wait_until


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
    real = entry_locator.iter_candidate_lines

    def recording(
        fd: int, entry_uuid: str, max_line_size: int, start: int = 0
    ) -> Iterator[Candidate]:
        calls.append(entry_uuid)
        return real(fd, entry_uuid, max_line_size, start)

    monkeypatch.setattr(entry_locator, "iter_candidate_lines", recording)
    yield calls


def ref_of(ref: ref_pb2.MediaRef) -> TranscriptImageRef:
    return TranscriptImageRef(ref.session_id, ref.entry_uuid, ref.index)


def wait_indexed(media: MediaEnv, path: Path) -> None:
    """Wait (polling, with a deadline) until the background build covers the file."""
    index = transcripts_of(media).line_index
    assert index is not None
    key = os.path.relpath(path, media.root)

    def covered() -> bool:
        state = index.store.state(key)
        return state is not None and state.scanned >= path.stat().st_size

    assert wait_until(covered, timeout=30.0), "the background build finished"


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
    path = write_transcript(first.root, "s", lines)
    (ref,) = mint("s", lines[60])
    (selector,) = bare([ref])
    _, data, _ = await read_media(first.stub, selector)
    assert data == expected_images(lines[60])[0]
    assert searches == ["img-30"]  # first touch: a search, the index built meanwhile
    wait_indexed(first, path)
    (again,) = bare(mint("s", lines[70]))
    _, data, _ = await read_media(first.stub, again)
    assert data == expected_images(lines[70])[0]
    assert searches == ["img-30"]  # the index answered
    await first.server.stop(0)
    restarted = await start_media()
    index = transcripts_of(restarted).line_index
    assert index is not None
    (other,) = bare(mint("s", lines[80]))
    _, data, _ = await read_media(restarted.stub, other)
    assert data == expected_images(lines[80])[0]
    assert searches == ["img-30"]
    assert index.builds == 0 and index.bytes_read == 0  # read from the state database


async def test_stat_of_1000_selectors_is_no_search_pass(
    start_media: StartMedia, searches: list[str]
) -> None:
    lines = image_lines(1000)
    media = await start_media()
    path = write_transcript(media.root, "many", lines)
    refs = [ref for line in lines[::2] for ref in mint("many", line)]
    assert len(refs) == 1000
    answer = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert [r.error.code for r in answer.results] == [""] * 1000
    assert transcripts_of(media).search_passes <= 1  # first touch: one pass at most
    wait_indexed(media, path)
    passes = transcripts_of(media).search_passes
    again = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert list(again.results) == list(answer.results)
    assert transcripts_of(media).search_passes == passes
    await media.server.stop(0)
    restarted = await start_media()
    again = await restarted.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    assert list(again.results) == list(answer.results)
    assert transcripts_of(restarted).search_passes == 0
    assert searches == []


class HeldStore(SqliteLineIndexStore):
    """The SQLite line index store, whose first rows wait until the test lets them in."""

    def __init__(self, state: Path) -> None:
        super().__init__(state)
        self.held = threading.Event()
        self.release = threading.Event()

    def append(
        self, key: str, expected: IndexedFile, lines: Sequence[IndexedLine], reached: IndexedFile
    ) -> bool:
        self.held.set()
        assert self.release.wait(60), "the test let the build go on"
        return super().append(key, expected, lines, reached)


def test_first_touch_answers_before_the_index_is_built(tmp_path: Path) -> None:
    lines = image_lines(400)
    root = tmp_path / "root"
    path = write_transcript(root, "big", lines)
    key = os.path.relpath(path, root)
    store = HeldStore(tmp_path / "state")
    transcripts = TranscriptMedia(
        DirectoryRoot(root), max_line_size=16 * 1024 * 1024, line_index=LineIndex(store)
    )
    try:
        (ref,) = mint("big", lines[0])
        answers: list[MediaInfo] = []
        answered = threading.Event()

        def lookup() -> None:
            answers.append(transcripts.stat(None, ref_of(ref), ref.pin, None))
            answered.set()

        # The lookup runs in a thread and is waited for with a deadline, while the
        # file's index build stays held back before its first rows.
        threading.Thread(target=lookup, daemon=True).start()
        assert answered.wait(30), "the lookup answered while the index was not built"
        assert answers[0].size_bytes == len(expected_images(lines[0])[0] or b"")
        assert store.held.wait(30), "a build was started in the background"
        state = store.state(key)
        assert state is None or state.scanned < path.stat().st_size, "not built yet"
        # Then the build finishes, and the index answers the next lookup.
        store.release.set()

        def built() -> bool:
            state = store.state(key)
            return state is not None and state.scanned == path.stat().st_size

        assert wait_until(built, timeout=30.0)
        (last,) = mint("big", lines[-2])
        info = transcripts.stat(None, ref_of(last), last.pin, None)
        assert info.size_bytes == len(expected_images(lines[-2])[0] or b"")
    finally:
        store.release.set()
        transcripts.close()


async def test_a_wrong_index_never_yields_wrong_bytes(
    start_media: StartMedia, searches: list[str]
) -> None:
    lines = image_lines(20)
    media = await start_media()
    write_transcript(media.root, "w", lines)
    refs = [ref for line in lines[::2] for ref in mint("w", line)]
    built = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=bare(refs)))
    wait_indexed(media, media.root / "proj" / "w.jsonl")
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
