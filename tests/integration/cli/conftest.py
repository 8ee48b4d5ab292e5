"""Fixtures of the CLI tests: `cli_servers`, both real services in a background loop, and
`fresh_up`, the real `scrollback up` on a fresh machine (an empty HOME: the bundled samples)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import SCROLLBACK, fresh_env
from tests.support.servers import ServerPair, free_port, serving_pair


@pytest.fixture
def cli_servers(tmp_path: Path) -> Iterator[ServerPair]:
    """History and media servers over tmp_path/root and tmp_path/state."""
    yield from serving_pair(tmp_path)


@pytest.fixture
def fresh_up(tmp_path: Path) -> Iterator[tuple[str, str, Path, list[str]]]:
    """`scrollback up` on an empty HOME, run from another directory; its addresses and output."""
    home = tmp_path / "home"
    home.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    history, media = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = fresh_env(home, SCROLLBACK_HISTORY_ADDR=history, SCROLLBACK_MEDIA_ADDR=media)
    process = subprocess.Popen(
        [SCROLLBACK, "up"],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while not any("Ctrl-C stops" in line for line in lines):
            line = process.stdout.readline()
            assert line, "scrollback up exited early:\n" + "".join(lines)
            lines.append(line)
            assert time.monotonic() < deadline
        yield history, media, home, lines
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
