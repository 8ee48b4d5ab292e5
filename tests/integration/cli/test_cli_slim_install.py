"""`scrollback slim --install` and to stdout over real servers: backups, partial files, sub-agents."""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import scrollback_app.cli_rescue as cli_rescue
from scrollback_app.cli import main
from tests.support.rescue import AGENT, PROJECT, SESSION, broken_session
from tests.support.servers import ServerPair


def run(capsys: pytest.CaptureFixture[str], pair: ServerPair, *argv: str) -> tuple[int, str, str]:
    addrs = ["--history-addr", pair.history_addr, "--media-addr", pair.media_addr]
    command, *rest = argv
    code = main([command, *addrs, *rest])
    out, err = capsys.readouterr()
    return code, out, err


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _FrozenClock(datetime):
    """Every run within one UTC second."""

    @classmethod
    def now(cls, tz: Any = None) -> _FrozenClock:
        return cls(2026, 1, 2, 3, 4, 5, tzinfo=tz)


def test_runs_in_one_second_never_overwrite_a_backup(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_rescue, "datetime", _FrozenClock)
    session = broken_session(cli_servers.root)
    original, agent_original = session.path.read_bytes(), session.subagent_path.read_bytes()
    install = ("slim", SESSION, "--install", "--projects-dir", str(cli_servers.root))
    for _ in range(3):
        code, printed, err = run(capsys, cli_servers, *install)
        assert code == 0, err
    backups = sorted(session.path.parent.glob(f"{SESSION}.jsonl.backup-*"))
    agent_backups = sorted(session.subagent_path.parent.glob(f"{AGENT}.jsonl.backup-*"))
    assert len(backups) == 3 and len(agent_backups) == 3
    # The original (and its sub-agent thread) is still there, under one of the backups.
    assert sha(original) in {sha(b.read_bytes()) for b in backups}
    assert sha(agent_original) in {sha(b.read_bytes()) for b in agent_backups}
    assert f"is now {backups[-1]}" in printed


def test_install_never_follows_a_link_planted_at_a_partial_file(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    session = broken_session(cli_servers.root)
    original = session.path.read_bytes()
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious.txt"
    precious.write_bytes(b"not yours to write")
    planted = session.path.with_name(session.path.name + ".slim-partial")
    planted.symlink_to(precious)
    agent_planted = session.subagent_path.with_name(session.subagent_path.name + ".slim-partial")
    agent_planted.symlink_to(outside / "new.jsonl")  # dangling: a create would make it

    code, _printed, err = run(
        capsys, cli_servers, "slim", SESSION, "--install", "--projects-dir", str(cli_servers.root)
    )
    assert code == 0, err
    assert precious.read_bytes() == b"not yours to write"
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    # The copy is installed as a file of its own, and the original kept as a backup.
    assert not session.path.is_symlink() and not session.subagent_path.is_symlink()
    assert b"cut by scrollback slim" in session.path.read_bytes()
    backups = list(session.path.parent.glob(f"{SESSION}.jsonl.backup-*"))
    assert [b.read_bytes() for b in backups] == [original]
    assert not planted.exists() and not planted.is_symlink()
    assert not agent_planted.is_symlink()


def test_install_never_writes_through_a_directory_link_out_of_the_projects(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    broken_session(cli_servers.root)
    projects = tmp_path / "claude" / "projects"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # The sub-agents' directory of the copy, planted as a link out of the projects dir.
    agents = projects / PROJECT / SESSION / "subagents"
    agents.parent.mkdir(parents=True)
    agents.symlink_to(outside, target_is_directory=True)
    code, _printed, err = run(
        capsys, cli_servers, "slim", SESSION, "--install", "--projects-dir", str(projects)
    )
    assert code != 0 and "leads out of" in err
    assert list(outside.iterdir()) == []
    assert not list((projects / PROJECT).glob("*.slim-partial"))
    assert not (projects / PROJECT / f"{SESSION}.jsonl").exists()

    # The copy's own directory planted as a link: not even a directory is made out there.
    agents.unlink()
    agents.parent.rmdir()
    (projects / PROJECT / SESSION).symlink_to(outside, target_is_directory=True)
    code, _printed, err = run(
        capsys, cli_servers, "slim", SESSION, "--install", "--projects-dir", str(projects)
    )
    assert code != 0 and "leads out of" in err
    assert list(outside.iterdir()) == []


def test_slim_to_stdout_says_it_left_the_subagents_out(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair
) -> None:
    session = broken_session(cli_servers.root)
    code, printed, err = run(capsys, cli_servers, "slim", SESSION)
    assert code == 0, err
    assert "left out 1 sub-agent thread(s)" in err and "-o FILE or --install" in err
    assert "2400x1600 px" in printed and "640x480 px" not in printed  # the session alone

    # A session without sub-agents: nothing to say.
    lonely = cli_servers.transcript("lonely")
    lonely.write_bytes(session.path.read_bytes().split(b"\n", 1)[0] + b"\n")
    code, _printed, err = run(capsys, cli_servers, "slim", "lonely")
    assert code == 0, err
    assert "sub-agent" not in err
