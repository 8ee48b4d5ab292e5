"""The opencode source on a real database: what a listing and an open read again, a schema
without session directories, and how refs name a message's images by part."""

from __future__ import annotations

from pathlib import Path

import orjson

from scrollback.contract.stripping import strip_line
from scrollback.linewalk import KnownLines
from scrollback.opencode.naming import image_names
from scrollback.opencode.source import MAPS_KEPT, OpencodeSource
from tests.support.opencode import OpencodeDb, write_sample


def test_listing_more_sessions_than_maps_kept_makes_each_map_once(tmp_path: Path) -> None:
    db = OpencodeDb(tmp_path / "opencode.db")
    for n in range(MAPS_KEPT + 20):
        session = db.session(f"session {n}")
        db.assistant(session, db.user(session, "a prompt"), "an answer")
    source = OpencodeSource(db.path)
    first = {t.session_id: source.stat(t).st_size for t in source.list(None)}
    assert source.maps_built == MAPS_KEPT + 20
    again = {t.session_id: source.stat(t).st_size for t in source.list(None)}
    assert again == first and source.maps_built == MAPS_KEPT + 20
    # A session that changes is made again, and only it.
    changed = next(iter(first))
    db.user(changed, "one more prompt")
    db.assistant(changed, db.user(changed, "and another"), "answered")
    sizes = {t.session_id: source.stat(t).st_size for t in source.list(None)}
    assert sizes[changed] > first[changed]
    assert source.maps_built == MAPS_KEPT + 21


def test_an_open_of_an_unchanged_session_reads_no_map_again(tmp_path: Path) -> None:
    db = OpencodeDb(tmp_path / "opencode.db")
    session = db.session("one")
    db.assistant(session, db.user(session, "a prompt"), "an answer")
    source = OpencodeSource(db.path)
    transcript = source.resolve(session, None)
    with source.open(transcript) as view:
        size = view.stat().st_size
    for _ in range(5):
        with source.open(transcript) as view:
            assert view.stat().st_size == size
    assert source.maps_built == 1
    db.user(session, "later")
    db.assistant(session, db.user(session, "later still"), "ok")
    with source.open(transcript) as view:
        assert view.stat().st_size > size
    assert source.maps_built == 2


def test_a_database_without_session_directories_lists_them_without_a_project(
    tmp_path: Path,
) -> None:
    db = OpencodeDb(tmp_path / "opencode.db")
    session = db.session("no directory")
    db.assistant(session, db.user(session, "a prompt"), "an answer")
    db.conn.execute("ALTER TABLE session DROP COLUMN directory")
    source = OpencodeSource(db.path)
    (listed,) = source.list(None)
    assert (listed.session_id, listed.project_dir, listed.title) == (session, "", "no directory")
    with source.open(listed) as view:
        assert view.stat().st_size > 0


def test_image_names_name_each_image_by_its_part_and_its_index_there() -> None:
    picture = "data:image/png;base64," + "iVBORw0KGgo" * 400
    note = "data:text/plain;base64,aGVsbG8="
    line = orjson.dumps(
        {
            "type": "opencode",
            "uuid": "msg_1",
            "payload": {
                "message": {"role": "user"},
                "parts": [
                    {"id": "prt_a", "data": {"type": "text", "text": picture}},
                    {"id": "prt_b", "data": {"type": "file", "url": note}},
                    {"id": "prt_c", "data": {"type": "tool", "state": {"attachments": [
                        {"url": picture}, {"url": picture}]}}},
                    {"id": "not an id!", "data": {"type": "file", "url": picture}},
                ],
            },
        }
    )  # fmt: skip
    stripped = strip_line(line, 1024)
    assert stripped is not None and stripped.image_count == 4
    assert image_names(stripped) == {0: ("prt_a", 0), 1: ("prt_c", 0), 2: ("prt_c", 1)}


def test_a_view_gives_its_lines_as_a_line_index_would(tmp_path: Path) -> None:
    """`lines_before` / `lines_from` (linewalk.KnownLines) give exactly the view's lines."""
    sample = write_sample(tmp_path / "opencode.db")
    source = OpencodeSource(sample.db.path)
    (transcript,) = [t for t in source.list(None) if t.session_id == sample.session]
    view = source.open(transcript)
    assert isinstance(view, KnownLines)
    size = view.stat().st_size
    data = view.read(size, 0)
    lines, start = [], 0
    for text in data.split(b"\n")[:-1]:
        lines.append((start, len(text)))
        start += len(text) + 1
    assert len(lines) == len(sample.messages)
    assert view.lines_from(0, 100) == lines
    assert view.lines_before(size, 100) == lines[::-1]
    for k, (offset, _) in enumerate(lines):
        assert view.lines_before(offset, 2) == lines[max(0, k - 2) : k][::-1]
        assert view.lines_from(offset, 2) == lines[k : k + 2]
        assert view.lines_from(offset + 1, 1) == lines[k + 1 : k + 2]
    view.close()
