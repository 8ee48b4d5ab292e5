"""The README's Quickstart, run as written on the bundled samples, line by line in its order.

`scrollback up` runs on a fresh machine (an empty HOME: the samples, `fresh_up`);
each line of the Quickstart's CLI block then runs as the installed command in
a directory of its own, with one substitution: TOKEN, the page token the line
before it printed. `tail` runs until Ctrl-C (SIGINT) after its first lines.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import SCROLLBACK, fresh_env

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[3] / "README.md"


def quickstart_lines() -> list[str]:
    """The lines of the Quickstart's second shell block (the CLI's), as written."""
    section = README.read_text().split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) >= 2, "the Quickstart has a block to start the pair and one for the CLI"
    assert blocks[0].split("#")[0].strip() == "./scripts/up"
    return [line for line in blocks[1].splitlines() if line.strip()]


def test_readme_quickstart_runs_as_written_on_the_samples(
    fresh_up: tuple[str, str, Path, list[str]], tmp_path: Path
) -> None:
    history, media, home, _ = fresh_up
    here = tmp_path / "here"
    here.mkdir()
    env = fresh_env(home, SCROLLBACK_HISTORY_ADDR=history, SCROLLBACK_MEDIA_ADDR=media)
    printed = ""
    for line in quickstart_lines():
        if line == ". .venv/bin/activate":
            continue  # this test runs the venv's command already
        argv = shlex.split(line, comments=True)
        assert argv[0] == "scrollback", line
        if "TOKEN" in argv:
            token = re.search(r"--older (\S+)", printed)
            assert token is not None, f"no token printed before {line!r}:\n{printed}"
            argv[argv.index("TOKEN")] = token.group(1)
        if argv[1] == "tail":
            printed = _until_ctrl_c(argv, env, here)
            continue
        result = subprocess.run(
            [SCROLLBACK, *argv[1:]], cwd=here, env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        printed = result.stdout
    # What the lines wrote: the photo, the same bytes back as an attachment, a thumbnail, a page.
    assert (here / "attachment.png").read_bytes() == (here / "photo.png").read_bytes()
    assert (here / "thumb.webp").read_bytes()[8:12] == b"WEBP"
    assert "The hello function is ready." in (here / "out" / "index.html").read_text()


def _until_ctrl_c(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a following command until its first lines, then Ctrl-C; it must exit 0."""
    process = subprocess.Popen(
        [SCROLLBACK, *argv[1:]], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first, process.stderr.read() if process.stderr else ""
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, stderr
    return first + rest
