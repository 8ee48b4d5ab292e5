"""The container image's default command, run on this machine as the image runs it.

The Dockerfile's CMD and its SCROLLBACK_* ENV are read from the Dockerfile
itself; the paths inside the image (/transcripts, /state) become temporary
directories, and the ports free ones. The services must listen on 0.0.0.0 (a
published port reaches them), serve without auth only when no token file is
given and say so, and say at start that an empty transcripts root serves nothing.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from client import Client
from client.errors import Unauthenticated
from scrollback_app.cli import build_parser
from scrollback_app.cli_up import _container_defaults, up_configs
from tests.support.cli import SCROLLBACK, fresh_env
from tests.support.security import TOKENS, write_token_file
from tests.support.servers import free_port

DOCKERFILE = Path(__file__).resolve().parents[3] / "Dockerfile"


def _image_command() -> list[str]:
    text = DOCKERFILE.read_text()
    cmd = re.findall(r"^CMD (\[.*\])$", text, flags=re.MULTILINE)
    assert len(cmd) == 1
    argv: list[str] = json.loads(cmd[0])
    assert argv[0] == "scrollback"
    return argv


def _image_env() -> dict[str, str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return dict(re.findall(r"(SCROLLBACK_\w+)=(\S+)", text))


@contextmanager
def _image_up(tmp_path: Path, **extra: str) -> Iterator[tuple[str, list[str]]]:
    """The image's command on this machine; the history address and the output so far."""
    image_env = _image_env()
    assert image_env["SCROLLBACK_TRANSCRIPTS"] == "/transcripts"
    transcripts = tmp_path / "transcripts"  # the empty directory of a missing host dir
    transcripts.mkdir()
    history, media = f"0.0.0.0:{free_port()}", f"0.0.0.0:{free_port()}"
    env = fresh_env(
        tmp_path,
        SCROLLBACK_TRANSCRIPTS=str(transcripts),
        SCROLLBACK_STATE=str(tmp_path / "state"),
        SCROLLBACK_HISTORY_ADDR=history,
        SCROLLBACK_MEDIA_ADDR=media,
        SCROLLBACK_HISTORY_WORKERS="1",
        SCROLLBACK_MEDIA_WORKERS="1",
        **extra,
    )
    process = subprocess.Popen(
        [SCROLLBACK, *_image_command()[1:]],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while not any("Ctrl-C stops" in line for line in lines):
            line = process.stdout.readline()
            assert line, "the image's command exited:\n" + "".join(lines)
            lines.append(line)
            assert time.monotonic() < deadline
        yield history, lines
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_the_image_listens_on_all_addresses_without_auth_only_when_no_token_file(
    tmp_path: Path,
) -> None:
    with _image_up(tmp_path) as (history, lines):
        output = "".join(lines)
        assert f"history service listening on {history}" in output, output
        assert "without auth (--insecure)" in output and "127.0.0.1:50051:50051" in output
        assert "holds no project directory" in output and "mounted as an empty one" in output
        port = history.rsplit(":", 1)[1]
        with Client(f"127.0.0.1:{port}", tls=False) as sb:
            assert list(sb.history.iter_sessions()) == []


def test_the_image_requires_the_token_file_it_is_given(tmp_path: Path) -> None:
    tokens = write_token_file(tmp_path / "tokens.yaml")
    with _image_up(tmp_path, SCROLLBACK_AUTH_TOKENS=str(tokens)) as (history, lines):
        output = "".join(lines)
        assert "--insecure" not in output and "bearer token" in output
        port = history.rsplit(":", 1)[1]
        with Client(f"127.0.0.1:{port}", tls=False) as sb, pytest.raises(Unauthenticated):
            list(sb.history.iter_sessions())
        with Client(f"127.0.0.1:{port}", tls=False, token=TOKENS["admin"]) as sb:
            assert list(sb.history.iter_sessions()) == []


def test_container_defaults_bind_all_addresses_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SCROLLBACK_HISTORY_ADDR", "SCROLLBACK_MEDIA_ADDR", "SCROLLBACK_AUTH_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    args = build_parser().parse_args(["up", "--container", "--transcripts", "."])
    _container_defaults(args)
    history, media = up_configs(args)
    assert (history.addr, media.addr) == ("0.0.0.0:50051", "0.0.0.0:50052")
    assert history.insecure and media.insecure
    args = build_parser().parse_args(
        ["up", "--container", "--transcripts", ".", "--history-addr", "127.0.0.1:6000"]
    )
    _container_defaults(args)
    assert up_configs(args)[0].addr == "127.0.0.1:6000"
