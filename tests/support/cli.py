"""Helpers of the CLI tests: the installed `scrollback` command as a subprocess, with its
output captured or in a pseudo-terminal of a given size."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.support.servers import ServerPair

SCROLLBACK = str(Path(sys.executable).with_name("scrollback"))
LONG_IDS = [
    "0d3a8e6f-290f-4105-a327-a2496e5e2a83",
    "4379d1bf-ccb1-414e-a856-9791b73f3af2",
]


def cli_env(**extra: str) -> dict[str, str]:
    """The test's environment without SCROLLBACK_* and terminal size variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env | extra


def cli(pair: ServerPair | None, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """`scrollback ARGV` against the pair (addresses by environment); output captured."""
    env = cli_env(**extra)
    if pair is not None:
        env |= {
            "SCROLLBACK_HISTORY_ADDR": pair.history_addr,
            "SCROLLBACK_MEDIA_ADDR": pair.media_addr,
        }
    return subprocess.run(
        [SCROLLBACK, *argv], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def in_terminal(
    pair: ServerPair, columns: int, *argv: str, stdout_only: bool = False, raw: bool = False
) -> tuple[int, str]:
    """`scrollback ARGV` with a pseudo-terminal of `columns` columns; (exit code, output).

    The output without its escape sequences, or as written with `raw`.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = cli_env(
        SCROLLBACK_HISTORY_ADDR=pair.history_addr,
        SCROLLBACK_MEDIA_ADDR=pair.media_addr,
        NO_COLOR="1",
        TERM="xterm",
    )
    process = subprocess.Popen(
        [SCROLLBACK, *argv],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE if stdout_only else slave,
        env=env,
    )
    os.close(slave)
    output = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        output += data
    os.close(master)
    code = process.wait(30)
    text = output.decode("utf-8", "replace")
    if not raw:
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    if stdout_only and process.stderr is not None:
        text += process.stderr.read().decode()
        process.stderr.close()
    return code, text


def fresh_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a fresh machine: HOME at `home`, no SCROLLBACK_* or XDG_* variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SCROLLBACK_") and not k.startswith("XDG_")
    }
    return env | {"HOME": str(home)} | extra
