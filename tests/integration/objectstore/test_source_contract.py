"""One suite over every TranscriptSource: a local directory, a SeaweedFS bucket, and a
directory beside an opencode database (the combined source).

The same tests run over each harness of tests/support/sources.py, as a storage
contract is tested once for every backend: what a source lists, resolves,
opens and names must not depend on where the transcripts are kept. A source
that lists on its own schedule (a bucket lists at most once a second) is
polled with a deadline where the contract says "found at once".
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from client import HistoryClient
from client._core import NO_RETRY
from scrollback.contract.refs import OPENCODE, RefError
from scrollback.gemini_live import PREFIX_BYTES
from scrollback.layouts import CLAUDE_CODE, CODEX, GEMINI
from scrollback.linefile import FileIdentity, FileRewrittenError
from scrollback.principals import Principal
from scrollback.transcripts import (
    AmbiguousSessionError,
    SessionNotFoundError,
    TranscriptFile,
    TranscriptSource,
)
from tests.support.codex import CWD, Rollout, rollout_name
from tests.support.gemini import PROJECT_ROOT, GeminiSession, full_session
from tests.support.seaweed import SeaweedServer
from tests.support.servers import ServerPair, assistant_line, user_line
from tests.support.sources import BucketHarness, DirectoryHarness, OpencodeHarness, SourceHarness

T = TypeVar("T")
ALICE = Principal("alice", frozenset({"proj-a"}))
BOB = Principal("bob", frozenset({"proj-b"}))
DAY = "2025/09/01"


@pytest.fixture(params=["directory", "bucket", "opencode"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> SourceHarness:
    if request.param == "directory":
        return DirectoryHarness(tmp_path)
    if request.param == "opencode":
        return OpencodeHarness(tmp_path)
    seaweed = request.getfixturevalue("seaweed")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    return BucketHarness(seaweed)


def _eventually(read: Callable[[], T], timeout: float = 15.0) -> T:
    """`read()` once it stops raising LookupError or AssertionError, within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read()
        except (LookupError, AssertionError):
            if time.monotonic() > deadline:
                raise


def _raises(error: type[Exception], call: Callable[[], object]) -> None:
    """AssertionError unless `call()` raises `error`."""
    try:
        call()
    except error:
        return
    raise AssertionError(f"no {error.__name__}")


def _transcript(text: str, count: int = 3) -> bytes:
    return user_line(f"{text}-u", f"first prompt of {text}") + b"".join(
        assistant_line(f"{text}-a{n}", f"answer {n}") for n in range(count)
    )


def _codex(session_id: str) -> bytes:
    rollout = Rollout(session_id)
    rollout.meta()
    rollout.assistant("hello from codex")
    return rollout.text()


def _shape(transcripts: list[TranscriptFile]) -> set[tuple[str, str, bool, str, str]]:
    return {
        (t.session_id, t.project_dir, t.is_subagent, t.parent_session_id, t.source)
        for t in transcripts
    }


def test_a_source_lists_both_layouts_and_names_them_alike(
    harness: SourceHarness, caplog: pytest.LogCaptureFixture
) -> None:
    rollout = str(uuid.uuid4())
    archived = str(uuid.uuid4())
    harness.write("projects/proj-a/s1.jsonl", _transcript("s1"))
    harness.write("projects/proj-a/s1/subagents/agent-x.jsonl", _transcript("x"))
    harness.write("projects/proj-a/agent-legacy.jsonl", _transcript("legacy"))
    harness.write("projects/proj-b/s2.jsonl", _transcript("s2"))
    harness.write("projects/proj-b/not an id!.jsonl", _transcript("skipped"))
    harness.write("projects/proj-b/s2.meta.json", b"{}")
    harness.write(f"codex/sessions/{DAY}/{rollout_name(rollout)}", _codex(rollout))
    harness.write(f"codex/archived_sessions/{rollout_name(archived)}", _codex(archived))
    source = harness.source()
    with caplog.at_level(logging.WARNING):
        listed = source.list(None)
    assert _shape(listed) == {
        ("s1", "proj-a", False, "", CLAUDE_CODE),
        ("agent-x", "proj-a", True, "s1", CLAUDE_CODE),
        ("agent-legacy", "proj-a", True, "", CLAUDE_CODE),
        ("s2", "proj-b", False, "", CLAUDE_CODE),
        (rollout, CWD, False, "", CODEX),
        (archived, CWD, False, "", CODEX),
    }
    assert {source.key_of(t) for t in listed} == {
        "proj-a/s1.jsonl",
        "proj-a/s1/subagents/agent-x.jsonl",
        "proj-a/agent-legacy.jsonl",
        "proj-b/s2.jsonl",
        f"//codex/sessions/{DAY}/{rollout_name(rollout)}",
        f"//codex/archived_sessions/{rollout_name(archived)}",
    }
    assert [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()] == [
        "skipping 1 .jsonl file(s) under the transcripts root: a session id (the file name "
        "without .jsonl) must match [A-Za-z0-9_-]{1,64}; rename them to list them "
        "(proj-b/not an id!.jsonl)"
    ]
    assert _shape(source.list(ALICE)) == {
        ("s1", "proj-a", False, "", CLAUDE_CODE),
        ("agent-x", "proj-a", True, "s1", CLAUDE_CODE),
        ("agent-legacy", "proj-a", True, "", CLAUDE_CODE),
    }


def test_resolve_sees_only_visible_projects_and_refuses_to_guess(harness: SourceHarness) -> None:
    harness.write("projects/proj-a/s1.jsonl", _transcript("s1"))
    source = harness.source()
    assert source.resolve("s1", None).project_dir == "proj-a"
    assert source.resolve("s1", ALICE).project_dir == "proj-a"
    for missing in (lambda: source.resolve("s1", BOB), lambda: source.resolve("nope", None)):
        with pytest.raises(SessionNotFoundError):
            missing()
    with pytest.raises(RefError):
        source.resolve("not an id!", None)
    harness.write("projects/proj-b/s1.jsonl", _transcript("s1-again"))

    _eventually(lambda: _raises(AmbiguousSessionError, lambda: source.resolve("s1", None)))
    # Each principal sees one of the two: no ambiguity, no leak of the other.
    assert source.resolve("s1", ALICE).project_dir == "proj-a"
    assert source.resolve("s1", BOB).project_dir == "proj-b"


def test_sources_never_shadow_one_another(harness: SourceHarness) -> None:
    shared = str(uuid.uuid4())
    harness.write(f"codex/sessions/{DAY}/{rollout_name(shared)}", _codex(shared))
    harness.write(f"projects/{CWD.strip('/').replace('/', '-')}/{shared}.jsonl", _transcript("c"))
    source = harness.source()
    assert source.resolve(shared, None).source == CLAUDE_CODE
    rollout = source.resolve(f"codex:{shared}", None)
    assert (rollout.source, rollout.project_dir) == (CODEX, CWD)
    assert source.name_of(rollout, None) == f"codex:{shared}"
    assert source.name_of(source.resolve(shared, None), None) == shared
    # A caller who cannot see the Claude Code session names the rollout by its bare id.
    codex_only = Principal("carol", frozenset({CWD}))
    assert source.resolve(shared, codex_only).source == CODEX
    assert source.name_of(rollout, codex_only) == shared


def test_open_stat_and_version_follow_the_bytes(harness: SourceHarness) -> None:
    data = _transcript("s1", 40)
    harness.write("projects/proj-a/s1.jsonl", data)
    source = harness.source()
    transcript = source.resolve("s1", None)
    assert source.exists(transcript)
    assert source.stat(transcript).st_size == len(data)
    with source.open(transcript) as opened:
        assert opened.read(len(data) + 10, 0) == data
        version = source.version(opened)
        identity = FileIdentity.of(opened)
    assert version == identity.version and identity.size == len(data)
    assert source.read_listed(transcript, lambda s: s.read(len(data), 0)) == data
    with source.open_listed(transcript) as listed:
        assert listed.read(16, 0) == data[:16]
    # Grown: the same version, and a token's identity continues in it.
    more = assistant_line("s1-more", "one more answer")
    harness.grow("projects/proj-a/s1.jsonl", data, more)
    with source.open(transcript) as opened:
        assert opened.read(len(more), len(data)) == more
        assert source.version(opened) == version
        assert identity.check(opened, len(data)).size == len(data) + len(more)
    # Rewritten from its start: another version, and the token is refused.
    harness.write("projects/proj-a/s1.jsonl", _transcript("rewritten", 41))
    with source.open(transcript) as opened:
        assert source.version(opened) != version
        with pytest.raises(FileRewrittenError):
            identity.check(opened, len(data))


def test_a_new_session_is_found_and_a_removed_one_is_gone(harness: SourceHarness) -> None:
    harness.write("projects/proj-a/s1.jsonl", _transcript("s1"))
    source: TranscriptSource = harness.source(rescan_interval=3600)
    assert [t.session_id for t in source.list(None)] == ["s1"]
    harness.write("projects/proj-a/s2.jsonl", _transcript("s2"))
    # A miss lists again (the index is an hour from its rescan): the new session is found.
    found = _eventually(lambda: source.resolve("s2", None))
    assert source.key_of(found) == "proj-a/s2.jsonl"
    harness.remove("projects/proj-a/s2.jsonl")
    # Gone: opening it fails at once; resolving it may name it until the next listing (a
    # bucket's `exists` is its last listing's answer), then fails too.
    with pytest.raises(SessionNotFoundError):
        source.open(found)
    rescanning = harness.source(rescan_interval=0)
    _eventually(lambda: _raises(SessionNotFoundError, lambda: rescanning.resolve("s2", None)))
    assert [t.session_id for t in rescanning.list(None)] == ["s1"]
    assert not rescanning.exists(found)


def test_a_directory_whose_path_starts_with_s3_colon_is_a_directory(
    seaweed: SeaweedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only `s3://` names a bucket: a setting is parsed once, and no URL is kept in a Path
    # (where `s3:/projects`, a relative dir, would read as the bucket `projects`).
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    pair = ServerPair(tmp_path / "s3:" / "projects", tmp_path / "state", transcripts="s3:/projects")
    pair.transcript("s1").write_bytes(_transcript("s1"))
    try:
        pair.start_history(0)
        with HistoryClient(pair.history_addr, retry=NO_RETRY) as history:
            assert [s.session_id for s in history.iter_sessions()] == ["s1"]
    finally:
        pair.close()


@pytest.fixture
def opencode_harness(tmp_path: Path) -> OpencodeHarness:
    return OpencodeHarness(tmp_path)


def test_database_sessions_are_listed_jailed_to_their_directory_and_keyed(
    opencode_harness: OpencodeHarness,
) -> None:
    db = opencode_harness.opencode
    opencode_harness.write("projects/proj-a/s1.jsonl", _transcript("s1"))
    top = db.session("top", directory="proj-a")
    child = db.session("child", parent=top, directory="proj-a")
    other = db.session("elsewhere", directory="proj-b")
    source = opencode_harness.source()
    assert _shape(source.list(None)) == {
        ("s1", "proj-a", False, "", CLAUDE_CODE),
        (top, "proj-a", False, "", OPENCODE),
        (child, "proj-a", True, top, OPENCODE),
        (other, "proj-b", False, "", OPENCODE),
    }
    assert {t.title for t in source.list(None) if t.source == OPENCODE} == {
        "top",
        "child",
        "elsewhere",
    }
    assert _shape(source.list(ALICE)) == {
        ("s1", "proj-a", False, "", CLAUDE_CODE),
        (top, "proj-a", False, "", OPENCODE),
        (child, "proj-a", True, top, OPENCODE),
    }
    assert source.key_of(source.resolve(top, None)) == f"//opencode/{top}"
    with pytest.raises(SessionNotFoundError):
        source.resolve(other, ALICE)
    assert source.resolve(f"opencode:{other}", BOB).session_id == other


def test_a_database_session_never_shadows_a_file_of_the_same_id(
    opencode_harness: OpencodeHarness,
) -> None:
    db = opencode_harness.opencode
    shared = db.session("shared id", directory="proj-b")
    opencode_harness.write(f"projects/proj-a/{shared}.jsonl", _transcript("c"))
    source = opencode_harness.source()
    assert source.resolve(shared, None).source == CLAUDE_CODE
    database = source.resolve(f"opencode:{shared}", None)
    assert database.source == OPENCODE
    assert source.name_of(database, None) == f"opencode:{shared}"
    assert source.name_of(source.resolve(shared, None), None) == shared
    # A caller who cannot see the Claude Code session names it by its bare id.
    assert source.resolve(shared, BOB).source == OPENCODE
    assert source.name_of(database, BOB) == shared


def test_a_database_session_grows_by_messages_and_a_rewrite_is_another_version(
    opencode_harness: OpencodeHarness,
) -> None:
    db = opencode_harness.opencode
    session = db.session("grows", directory="proj-a")
    first = db.user(session, "first prompt")
    db.assistant(session, first, "a first answer past the version's head " * 200)
    source = opencode_harness.source()
    transcript = source.resolve(session, None)
    with source.open(transcript) as opened:
        size = opened.stat().st_size
        data = opened.read(size + 10, 0)
        version = source.version(opened)
        identity = FileIdentity.of(opened)
    assert source.stat(transcript).st_size == size == len(data) and data.count(b"\n") == 2
    assert source.read_listed(transcript, lambda s: s.read(size, 0)) == data
    # A new message: the view grows at its end, the same version, tokens continue.
    db.user(session, "second prompt")
    with source.open(transcript) as opened:
        assert opened.read(size, 0) == data
        assert source.version(opened) == version
        assert identity.check(opened, size).size > size
    # The first message's text rewritten: another version, the token refused.
    part = db.conn.execute(
        "SELECT id FROM part WHERE message_id = ? ORDER BY id LIMIT 1", (first,)
    ).fetchone()[0]
    db.update_part(part, {"type": "text", "text": "a rewritten first prompt"})
    with source.open(transcript) as opened:
        assert source.version(opened) != version
        with pytest.raises(FileRewrittenError):
            identity.check(opened, size)


def test_a_new_database_session_is_found_and_a_deleted_one_is_gone(
    opencode_harness: OpencodeHarness,
) -> None:
    db = opencode_harness.opencode
    kept = db.session("kept", directory="proj-a")
    source: TranscriptSource = opencode_harness.source(rescan_interval=3600)
    assert [t.session_id for t in source.list(None)] == [kept]
    fresh = db.session("fresh", directory="proj-a")
    found = source.resolve(fresh, None)  # a miss lists again at once
    assert found.session_id == fresh
    db.conn.execute("DELETE FROM session WHERE id = ?", (fresh,))
    with pytest.raises(SessionNotFoundError):
        source.open(found)
    assert not source.exists(found)
    _raises(SessionNotFoundError, lambda: source.resolve(fresh, None))


def _gemini(session_id: str, kind: str = "main") -> GeminiSession:
    session = GeminiSession(session_id, kind=kind)
    session.user(f"{session_id}-u", "first prompt")
    session.gemini(f"{session_id}-g", "")
    session.stream(f"{session_id}-g", "an answer")
    return session


def _gemini_path(session: GeminiSession, slug: str = "gemini-project", parent: str = "") -> str:
    chats = f"gemini/tmp/{slug}/chats"
    return f"{chats}/{parent}/{session.file_name()}" if parent else f"{chats}/{session.file_name()}"


def test_gemini_sessions_are_listed_resolved_and_named_alike(tmp_path: Path) -> None:
    # Gemini's home is a local directory: its sessions are in the directory harness only.
    harness = DirectoryHarness(tmp_path)
    main, shared = str(uuid.uuid4()), str(uuid.uuid4())
    child = _gemini(str(uuid.uuid4()), kind="subagent")
    harness.write("gemini/tmp/gemini-project/.project_root", PROJECT_ROOT.encode() + b"\n")
    harness.write(_gemini_path(_gemini(main)), _gemini(main).data())
    harness.write(_gemini_path(child, parent=main), child.data())
    harness.write(_gemini_path(_gemini(shared), slug="bare"), _gemini(shared).data())
    harness.write(f"projects/proj-a/{shared}.jsonl", _transcript("c"))
    harness.write("gemini/tmp/bare/chats/notes.jsonl", b"{}\n")  # not a session file
    source = harness.source()
    listed = [t for t in source.list(None) if t.source == GEMINI]
    assert _shape(listed) == {
        (main, PROJECT_ROOT, False, "", GEMINI),
        (child.session_id, PROJECT_ROOT, True, main, GEMINI),
        (shared, "bare", False, "", GEMINI),
    }
    assert {source.key_of(t) for t in listed} == {
        f"//{_gemini_path(_gemini(main))}",
        f"//{_gemini_path(child, parent=main)}",
        f"//{_gemini_path(_gemini(shared), slug='bare')}",
    }
    # Sources never shadow one another: the bare id is Claude Code's, `gemini:` names Gemini's.
    assert source.resolve(shared, None).source == CLAUDE_CODE
    gemini = source.resolve(f"gemini:{shared}", None)
    assert gemini.source == GEMINI and source.name_of(gemini, None) == f"gemini:{shared}"
    assert source.resolve(main, Principal("dana", frozenset({PROJECT_ROOT}))).source == GEMINI
    with pytest.raises(SessionNotFoundError):
        source.resolve(main, ALICE)


def test_a_gemini_session_opens_as_its_live_lines_and_a_rewind_is_a_new_version(
    tmp_path: Path,
) -> None:
    harness = DirectoryHarness(tmp_path)
    session_id = str(uuid.uuid4())
    session = full_session(session_id)
    relative = _gemini_path(session)
    harness.write(relative, session.data())
    source = harness.source()
    transcript = source.resolve(session_id, None)
    assert source.stat(transcript).st_size == len(session.data())  # the file's own size
    with source.open(transcript) as opened:
        identity = FileIdentity.of(opened, source.version)
        lines = [line for line in opened.read(identity.size, 0).split(b"\n") if line.strip()]
        version = source.version(opened)
    latest = {
        line[7 : line.index(b'"', 7)]: line for line in session.lines if line[:7] == b'{"id":"'
    }
    assert lines == [latest[i.encode()] for i in session.messages]
    assert identity.size == PREFIX_BYTES + len(session.data())
    # An append that rewrites the last message: the same version, the identity continues.
    before = session.data()
    session.gemini("g9", "")
    session.stream("g9", "streamed on")
    harness.grow(relative, before, session.data()[len(before) :])
    with source.open(transcript) as opened:
        assert source.version(opened) == version
        assert identity.check(opened, identity.size, source.version).size > identity.size
    # A rewind drops messages already served: another version, and the identity is refused.
    before = session.data()
    session.rewind("g9")
    harness.grow(relative, before, session.data()[len(before) :])
    with source.open(transcript) as opened:
        assert source.version(opened) != version
        with pytest.raises(FileRewrittenError):
            identity.check(opened, identity.size, source.version)
