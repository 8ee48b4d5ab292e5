"""The Codex sessions dir as a second root, and refs that name entries by offset (docs/contract.md §1, §4)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from scrollback.contract.refs import (
    RefError,
    entry_name,
    has_usable_uuid,
    offset_of_entry_name,
    parse_transcript_ref,
    split_session_id,
)
from scrollback.directory import DirectoryRoot
from scrollback.layouts import CLAUDE_CODE, CODEX, rollout_session_id
from scrollback.principals import Principal
from scrollback.transcripts import SessionNotFoundError
from tests.support.codex import CWD, Rollout, rollout_name, write_rollout


def test_rollout_session_id_is_the_uuid_ending_the_name() -> None:
    sid = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
    assert rollout_session_id(f"rollout-2025-05-07T17-24-21-{sid}.jsonl") == sid
    assert rollout_session_id(f"rollout-2025-05-07T17-24-21-{sid.upper()}.jsonl") == sid
    assert rollout_session_id("plain-name.jsonl") == "plain-name"
    assert rollout_session_id(f"rollout-{sid}.jsonl.zst") is None
    assert rollout_session_id("notes.txt") is None


def test_entry_names_by_offset() -> None:
    assert entry_name("", 0) == "at-0"
    assert entry_name("", 18231) == "at-18231"
    assert entry_name("u-1", 5) == "u-1"
    assert entry_name("at-5", 99) == "at-99"  # the offset form is reserved: never a uuid name
    assert entry_name("bad uuid", 7) == "at-7"
    assert offset_of_entry_name("at-18231") == 18231
    for name in ("at-", "at-01", "at--1", "at-1x", "u-1", "AT-1"):
        assert offset_of_entry_name(name) is None
    assert not has_usable_uuid("at-3") and has_usable_uuid("at-x")
    assert parse_transcript_ref("s/at-42/1").entry_uuid == "at-42"
    with pytest.raises(RefError):
        parse_transcript_ref("s/at 42/1")


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    claude = tmp_path / "claude"
    (claude / "proj").mkdir(parents=True)
    (claude / "proj" / "c1.jsonl").write_bytes(b'{"type":"user","uuid":"u"}\n')
    return claude, tmp_path / "codex" / "sessions"


def test_rollouts_listed_from_dated_dirs_and_the_archive_with_cwd_and_source(
    tmp_path: Path,
) -> None:
    claude, codex = _tree(tmp_path)
    live, old = str(uuid.uuid4()), str(uuid.uuid4())
    rollout = Rollout(live)
    rollout.meta()
    write_rollout(codex, rollout)
    archived = Rollout(old)
    archived.meta(cwd="/srv/other")
    write_rollout(codex, archived, archived=True)
    root = DirectoryRoot(claude, codex=codex)
    listed = {t.session_id: t for t in root.list(None)}
    assert listed["c1"].source == CLAUDE_CODE
    assert (listed[live].source, listed[live].project_dir) == (CODEX, CWD)
    assert (listed[old].source, listed[old].project_dir) == (CODEX, "/srv/other")
    assert root.key_of(listed[live]).startswith("//codex/sessions/2025/09/01/rollout-")
    assert root.key_of(listed[old]).startswith("//codex/archived_sessions/rollout-")
    assert root.key_of(listed["c1"]) == "proj/c1.jsonl"
    # Visibility is the cwd's: a principal of another project does not find it.
    other = Principal("bob", frozenset({"proj"}))
    assert {t.session_id for t in root.list(other)} == {"c1"}
    with pytest.raises(SessionNotFoundError):
        root.resolve(live, other)
    assert (
        root.resolve(live, Principal("alice", frozenset({CWD}))).location == listed[live].location
    )


def test_a_rollout_whose_meta_arrives_later_gets_its_project(tmp_path: Path) -> None:
    claude, codex = _tree(tmp_path)
    sid = str(uuid.uuid4())
    path = codex / "2025" / "09" / "01" / rollout_name(sid)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    root = DirectoryRoot(claude, codex=codex, rescan_interval=0)
    assert {t.session_id: t.project_dir for t in root.list(None)}[sid] == ""
    rollout = Rollout(sid)
    rollout.meta()
    path.write_bytes(rollout.text())
    assert {t.session_id: t.project_dir for t in root.list(None)}[sid] == CWD


def test_a_rollout_linked_out_of_the_sessions_dir_does_not_exist(tmp_path: Path) -> None:
    claude, codex = _tree(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    sid = str(uuid.uuid4())
    rollout = Rollout(sid)
    rollout.meta()
    target = outside / rollout_name(sid)
    target.write_bytes(rollout.text())
    day = codex / "2025" / "09" / "01"
    day.mkdir(parents=True)
    os.symlink(target, day / rollout_name(sid))
    # A linked dir is not walked either.
    linked_dir = codex / "2025" / "09" / "02"
    os.symlink(outside, linked_dir)
    root = DirectoryRoot(claude, codex=codex)
    assert sid not in {t.session_id for t in root.list(None)}
    with pytest.raises(SessionNotFoundError):
        root.resolve(sid, None)


def test_a_new_rollout_is_found_at_the_next_refresh(tmp_path: Path) -> None:
    claude, codex = _tree(tmp_path)
    root = DirectoryRoot(claude, codex=codex, rescan_interval=0)
    assert [t.session_id for t in root.list(None)] == ["c1"]
    sid = str(uuid.uuid4())
    rollout = Rollout(sid)
    rollout.meta()
    write_rollout(codex, rollout)
    deadline = time.monotonic() + 5
    while sid not in {t.session_id for t in root.list(None)}:
        assert time.monotonic() < deadline, "the new rollout was never listed"
    assert root.resolve(sid, None).source == CODEX


def test_session_ids_name_their_source_and_a_bare_id_the_first_source_seen(
    tmp_path: Path,
) -> None:
    assert split_session_id("abc") == ("", "abc")
    assert split_session_id("codex:abc") == (CODEX, "abc")
    assert split_session_id("claude-code:abc") == (CLAUDE_CODE, "abc")
    assert split_session_id("gemini:abc") == ("gemini", "abc")
    for bad in ("cursor:abc", "codex:", ":abc", "codex:a:b", "codex:a b", "codex:" + "a" * 65):
        with pytest.raises(RefError):
            split_session_id(bad)
    claude, codex = _tree(tmp_path)
    rollout = Rollout("c1")  # a rollout named after the Claude Code session c1
    rollout.meta(cwd="proj")
    path = codex / "2025" / "09" / "01" / "c1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(rollout.text())
    root = DirectoryRoot(claude, codex=codex)
    both = Principal("alice", frozenset({"proj"}))
    assert root.resolve("c1", both).source == CLAUDE_CODE
    assert root.resolve("claude-code:c1", both).source == CLAUDE_CODE
    assert root.resolve("codex:c1", both).source == CODEX
    named = sorted((root.name_of(t, both), t.source) for t in root.list(both))
    assert named == [("c1", CLAUDE_CODE), ("codex:c1", CODEX)]
    # Where the rollout is all a caller sees of that id, its bare id names it.
    rollout.lines.clear()
    rollout.meta(cwd="/srv/x")
    path.write_bytes(rollout.text())
    root = DirectoryRoot(claude, codex=codex)
    other = Principal("bob", frozenset({"/srv/x"}))
    assert root.resolve("c1", other).source == CODEX
    assert [root.name_of(t, other) for t in root.list(other)] == ["c1"]
    with pytest.raises(SessionNotFoundError):
        root.resolve("claude-code:c1", other)
