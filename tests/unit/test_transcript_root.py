"""DirectoryRoot: each transcript jailed to its own project dir, and an index a miss does not rebuild.

Real files and real symlinks in a temporary root; the counters are the
index's own (`refreshes`, `dir_scans`), not mocks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scrollback.directory import DirectoryRoot
from scrollback.principals import Principal
from scrollback.transcripts import AmbiguousSessionError, SessionNotFoundError

ALICE = Principal("alice", frozenset({"proj-a"}))
BOB = Principal("bob", frozenset({"proj-b"}))
ADMIN = Principal("admin", frozenset({"*"}))


def _write(path: Path, text: str = '{"type":"user","uuid":"u0"}\n') -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _settle(root: Path) -> None:
    """Date every directory a minute back, so none looks freshly changed to the index."""
    past = time.time() - 60
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        os.utime(directory, (past, past))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    _write(root / "proj-a" / "sess-a.jsonl")
    _write(root / "proj-a" / "sess-a" / "subagents" / "agent-a1.jsonl")
    _write(root / "proj-b" / "sess-b.jsonl")
    _write(tmp_path / "outside" / "secret.jsonl")
    return root


def _ids(root: DirectoryRoot, principal: Principal | None) -> list[str]:
    return sorted(t.session_id for t in root.list(principal))


def test_a_link_out_of_the_root_never_makes_a_real_session_ambiguous(tree: Path) -> None:
    # bob may write proj-b: he drops links named like alice's session, to outside the root
    (tree / "proj-b" / "sess-a.jsonl").symlink_to(tree.parent / "outside" / "secret.jsonl")
    _write(tree / "proj-b" / "sess-x" / "subagents" / "x.jsonl")
    (tree / "proj-b" / "sess-x" / "subagents" / "agent-a1.jsonl").symlink_to("/etc/hostname")
    root = DirectoryRoot(tree)
    for principal in (None, ADMIN, ALICE):
        assert root.resolve("sess-a", principal).location == str(tree / "proj-a" / "sess-a.jsonl")
        found = root.resolve("agent-a1", principal)
        assert found.project_dir == "proj-a" and found.parent_session_id == "sess-a"
    assert _ids(root, None) == ["agent-a1", "sess-a", "sess-b", "x"]
    with pytest.raises(SessionNotFoundError):
        root.resolve("sess-a", BOB)


def test_a_link_to_another_project_does_not_exist(tree: Path) -> None:
    (tree / "proj-b" / "stolen.jsonl").symlink_to("../proj-a/sess-a.jsonl")
    (tree / "proj-b" / "sess-b" / "subagents").mkdir(parents=True)
    (tree / "proj-b" / "sess-b" / "subagents" / "agent-s.jsonl").symlink_to(
        "../../../proj-a/sess-a.jsonl"
    )
    # a whole session dir, and a whole project dir, linked elsewhere
    (tree / "proj-b" / "sess-c").symlink_to("../proj-a/sess-a")
    (tree / "proj-c").symlink_to("proj-a")
    root = DirectoryRoot(tree)
    for principal in (None, BOB, ADMIN):
        for session_id in ("stolen", "agent-s"):
            with pytest.raises(SessionNotFoundError):
                root.resolve(session_id, principal)
        # not ambiguous through proj-c or sess-c either
        assert root.resolve("sess-a", None).project_dir == "proj-a"
        assert root.resolve("agent-a1", None).parent_session_id == "sess-a"
    assert _ids(root, None) == ["agent-a1", "sess-a", "sess-b"]
    assert _ids(root, BOB) == ["sess-b"]


def test_a_link_inside_its_own_project_is_a_transcript(tree: Path) -> None:
    (tree / "proj-a" / "alias.jsonl").symlink_to("sess-a.jsonl")
    (tree / "proj-a" / "sess-a" / "subagents" / "agent-a2.jsonl").symlink_to("agent-a1.jsonl")
    root = DirectoryRoot(tree)
    alias = root.resolve("alias", ALICE)
    with root.open(alias) as handle:
        expected = (tree / "proj-a" / "sess-a.jsonl").read_bytes()
        assert handle.read(len(expected) + 1, 0) == expected
    assert root.resolve("agent-a2", ALICE).parent_session_id == "sess-a"
    assert "alias" in _ids(root, ALICE)
    with pytest.raises(SessionNotFoundError):
        root.resolve("alias", BOB)


def test_a_link_repointed_out_of_its_project_after_listing_is_refused_at_open(
    tree: Path,
) -> None:
    link = tree / "proj-b" / "moving.jsonl"
    link.symlink_to("sess-b.jsonl")
    root = DirectoryRoot(tree, rescan_interval=3600)
    found = root.resolve("moving", BOB)
    link.unlink()
    link.symlink_to("../proj-a/sess-a.jsonl")
    with pytest.raises(SessionNotFoundError):
        root.open(found)


def test_two_real_transcripts_of_one_id_are_still_ambiguous(tree: Path) -> None:
    _write(tree / "proj-b" / "sess-a.jsonl")
    root = DirectoryRoot(tree)
    with pytest.raises(AmbiguousSessionError):
        root.resolve("sess-a", None)
    assert root.resolve("sess-a", ALICE).project_dir == "proj-a"


def test_misses_list_no_directory_and_a_new_session_is_found_at_once(tree: Path) -> None:
    for index in range(20):
        _write(tree / f"proj-{index}" / f"s-{index}.jsonl")
    root = DirectoryRoot(tree, rescan_interval=3600)
    _settle(tree)
    assert root.resolve("sess-a", ALICE).project_dir == "proj-a"
    scans = root.dir_scans
    for index in range(1000):
        with pytest.raises(SessionNotFoundError):
            root.resolve(f"nope-{index}", ALICE)
    assert root.dir_scans == scans  # nothing changed, so a thousand misses listed nothing
    # a hidden session takes the very path a nonexistent one takes
    refreshes = root.refreshes
    for _ in range(1000):
        with pytest.raises(SessionNotFoundError):
            root.resolve("sess-b", ALICE)
    assert root.refreshes - refreshes == 1000 and root.dir_scans == scans
    # an agent starts a session: the next miss lists again only the changed project
    # (proj-a and its one subagents dir, not the 24 dirs of the root), and finds it
    _write(tree / "proj-a" / "fresh.jsonl")
    assert root.resolve("fresh", ALICE).project_dir == "proj-a"
    assert root.dir_scans - scans == 2
    # and a sub-agent in a new session dir
    _write(tree / "proj-a" / "fresh" / "subagents" / "agent-f.jsonl")
    assert root.resolve("agent-f", ALICE).parent_session_id == "fresh"
    # a new project dir too
    _write(tree / "proj-new" / "newest.jsonl")
    assert root.resolve("newest", None).project_dir == "proj-new"


def test_a_removed_transcript_is_not_found(tree: Path) -> None:
    root = DirectoryRoot(tree, rescan_interval=3600)
    assert root.resolve("sess-b", BOB).project_dir == "proj-b"
    (tree / "proj-b" / "sess-b.jsonl").unlink()
    with pytest.raises(SessionNotFoundError):
        root.resolve("sess-b", BOB)
    assert _ids(root, BOB) == []
