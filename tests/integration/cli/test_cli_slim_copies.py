"""`scrollback sessions` in an 80-column terminal marks a slim fork as a slim copy, and the fork
`scrollback slim --fork --install` writes keeps its original's mode and modification time."""

from __future__ import annotations

import stat

from tests.support.cli import cli, in_terminal
from tests.support.rescue import PROJECT, SESSION, broken_session
from tests.support.servers import ServerPair


def test_sessions_marks_a_slim_fork(cli_servers: ServerPair) -> None:
    session = broken_session(cli_servers.root)
    session.path.chmod(0o640)
    done = cli(
        cli_servers, "slim", SESSION, "--fork", "--install", "--projects-dir", str(cli_servers.root)
    )
    assert done.returncode == 0, done.stderr
    project = cli_servers.root / PROJECT
    (fork,) = [p for p in project.glob("*.jsonl") if p.stem != SESSION and p != session.path]
    assert stat.S_IMODE(fork.stat().st_mode) == 0o640
    assert fork.stat().st_mtime_ns == session.path.stat().st_mtime_ns
    code, output = in_terminal(cli_servers, 80, "sessions")
    assert code == 0, output
    marked = [line for line in output.splitlines() if "slim copy:" in line]
    assert len(marked) == 1 and fork.stem[:8] in marked[0], output
