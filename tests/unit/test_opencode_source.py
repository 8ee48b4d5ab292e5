"""The opencode source's own costs: what a listing and an open read again, on a real database."""

from __future__ import annotations

from pathlib import Path

from scrollback.opencode.source import MAPS_KEPT, OpencodeSource
from tests.support.opencode import OpencodeDb


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
