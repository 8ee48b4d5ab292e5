"""The first hour of a new user (issue 14): the real `scrollback` command against real servers.

Every test runs the installed console script as a subprocess; where the
terminal's width or a terminal on stdout matters, in a pseudo-terminal of a
given size.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.support.cli import LONG_IDS, SCROLLBACK, cli, cli_env, in_terminal
from tests.support.servers import ServerPair, assistant_line, free_port, png, user_line


def _sessions(pair: ServerPair) -> None:
    for n, session in enumerate(LONG_IDS):
        pair.transcript(
            session, project="-Users-someone-workspace-a-rather-long-project-name"
        ).write_bytes(user_line(f"u{n}", "a title long enough to need cutting at any width " * 3))


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_sessions_never_cut_ids(cli_servers: ServerPair, columns: int) -> None:
    _sessions(cli_servers)
    code, out = in_terminal(cli_servers, columns, "sessions")
    assert code == 0, out
    for session in LONG_IDS:
        assert session in out, f"id cut at {columns} columns:\n{out}"
    assert all(len(line) <= columns for line in out.splitlines())


def test_send_to_an_unknown_session_is_not_found_and_tail_exits_3(
    cli_servers: ServerPair,
) -> None:
    sent = cli(cli_servers, "send", "no-such-session", "hello")
    assert sent.returncode == 3 and "NOT_FOUND" in sent.stderr and "accepted" not in sent.stdout
    started = time.monotonic()
    tail = cli(cli_servers, "tail", "no-such-session")
    assert tail.returncode == 3 and "NOT_FOUND" in tail.stderr
    assert time.monotonic() - started < 20
    keyed = cli(cli_servers, "send", "--chat-key", "new-chat", "hello")
    assert keyed.returncode == 0 and "accepted" in keyed.stdout


def test_unavailable_names_the_address_and_how_to_start(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{unused.getsockname()[1]}"
    result = cli(None, "sessions", "--history-addr", addr, "--timeout", "2")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and addr in result.stderr
    assert "scrollback up" in result.stderr and "--history-addr" in result.stderr
    assert "backends" not in result.stderr


def test_send_without_text_names_the_missing_argument(cli_servers: ServerPair) -> None:
    result = cli(cli_servers, "send", "some-session")
    assert result.returncode == 2 and "missing the message TEXT" in result.stderr


def test_broken_pipe_exits_quietly(cli_servers: ServerPair) -> None:
    cli_servers.transcript("big").write_bytes(
        b"".join(user_line(f"u{n}", f"q{n}") for n in range(50))
    )
    env = cli_env(SCROLLBACK_HISTORY_ADDR=cli_servers.history_addr)
    for argv in (["window", "big"], ["window", "big", "--json"], ["sessions"]):
        # The reader is gone before the first write, as `| head -1` is after its line.
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = subprocess.run(
                [SCROLLBACK, *argv],
                stdout=write_end,
                stderr=subprocess.PIPE,
                env=env,
                timeout=60,
                check=False,
            )
        finally:
            os.close(write_end)
        assert result.returncode == 0 and result.stderr == b"", (argv, result.stderr)


def test_next_page_hint_keeps_page_size_and_direction(cli_servers: ServerPair) -> None:
    cli_servers.transcript("p").write_bytes(b"".join(user_line(f"u{n}", f"q{n}") for n in range(9)))
    latest = cli(cli_servers, "window", "p", "--page-size", "3")
    hint = next(line for line in latest.stdout.splitlines() if line.startswith("next page:"))
    assert " --older " in hint and hint.endswith(" --page-size 3")
    oldest = cli(cli_servers, "window", "p", "--oldest-first", "--page-size", "3")
    hint = next(line for line in oldest.stdout.splitlines() if line.startswith("next page:"))
    assert " --newer " in hint and " --older " not in hint and hint.endswith(" --page-size 3")
    # The printed command works as printed: the next three, oldest first.
    argv = hint.removeprefix("next page: scrollback ").split()
    page = json.loads(cli(cli_servers, *argv, "--json").stdout)
    assert [e["uuid"] for e in page["entries"]] == ["u3", "u4", "u5"]


def test_failed_export_leaves_no_directory(cli_servers: ServerPair, tmp_path: Path) -> None:
    target = tmp_path / "new" / "out"
    result = cli(cli_servers, "export", "missing", "--html", str(target))
    assert result.returncode == 3
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert cli(cli_servers, "export", "missing", "--html", str(kept)).returncode == 3
    assert kept.is_dir()


def _photo(pair: ServerPair) -> tuple[str, str]:
    pair.transcript("ph").write_bytes(user_line("p0", "a photo", images=(png(5, 120),)))
    page = json.loads(cli(pair, "window", "ph", "--json").stdout)
    ref = page["entries"][0]["mediaRefs"][0]
    return ref["uri"], ref["pin"]


def test_media_output_errors(cli_servers: ServerPair, tmp_path: Path) -> None:
    ref, pin = _photo(cli_servers)
    missing = cli(cli_servers, "media", ref, "--pin", pin, "-o", "/no/such/dir/x.png")
    assert missing.returncode == 2 and "/no/such/dir" in missing.stderr
    assert "does not exist" in missing.stderr
    code, out = in_terminal(cli_servers, 100, "media", ref, "--pin", pin, "-o", "-")
    assert code == 2 and "terminal" in out and "PNG" not in out
    piped = subprocess.run(
        [SCROLLBACK, "media", ref, "--pin", pin, "-o", "-"],
        capture_output=True,
        env=cli_env(SCROLLBACK_MEDIA_ADDR=cli_servers.media_addr),
        timeout=30,
        check=False,
    )
    assert piped.returncode == 0 and piped.stdout == png(5, 120)


def test_window_and_tail_label_tools_photos_and_messages(cli_servers: ServerPair) -> None:
    tool_use = {
        "type": "assistant",
        "uuid": "a1",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
            ],
        },
    }
    tool_result = {
        "type": "user",
        "uuid": "r1",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}],
        },
    }
    cli_servers.transcript("tools").write_bytes(
        orjson.dumps(tool_use)
        + b"\n"
        + orjson.dumps(tool_result)
        + b"\n"
        + user_line("p0", "look", images=(png(1),))
    )
    code, out = in_terminal(cli_servers, 250, "window", "tools")  # wide: no cell wraps
    assert code == 0
    assert "[tool_use Bash] ls" in out and "[tool_result] a.txt" in out and "look [image]" in out

    accepted = cli(cli_servers, "send", "tools", "queued before tail")
    assert accepted.returncode == 0
    process = subprocess.Popen(
        [SCROLLBACK, "tail", "tools"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(SCROLLBACK_HISTORY_ADDR=cli_servers.history_addr),
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert "[1 photo]" in lines[2] and "look [image]" in lines[2]
        assert lines[3].split()[0] == "accepted" and "queued before tail" in lines[3]
        assert cli(cli_servers, "send", "tools", "live one").returncode == 0
        live = process.stdout.readline()
        assert live.split()[0] == "accepted" and "live one" in live
    finally:
        process.terminate()
        process.wait(10)


def test_html_export_strips_ansi_sizes_images_and_anchors(
    cli_servers: ServerPair, tmp_path: Path
) -> None:
    cli_servers.transcript("h").write_bytes(
        assistant_line("a0", "\x1b[31mred\x1b[0m and \x1b]0;title\x07plain")
        + user_line("p0", "a photo", images=(png(3, 120),))
    )
    out = tmp_path / "out"
    result = cli(cli_servers, "export", "h", "--html", str(out))
    assert result.returncode == 0, result.stderr
    page = (out / "index.html").read_text()
    assert "\x1b" not in page and "red and plain" in page
    img = re.search(r"<img [^>]*>", page)
    assert img is not None and 'width="120"' in img.group(0) and 'height="120"' in img.group(0)
    assert 'id="e-a0"' in page and 'href="#e-p0"' in page


def test_version_and_help(tmp_path: Path) -> None:
    version = cli(None, "--version")
    assert version.returncode == 0 and re.fullmatch(r"scrollback \S+\n", version.stdout)
    for module in ("history_service", "media_service"):
        shown = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=False
        )
        assert shown.returncode == 0 and shown.stdout.startswith(f"python -m {module} ")
        shown = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=False
        )
        text = " ".join(shown.stdout.split())
        assert "`" not in text and "default 127.0.0.1:5005" in text and "~/.claude/projects" in text
    for argv in (["--help"], ["up", "--help"], ["gc", "--help"], ["window", "--help"]):
        text = cli(None, *argv).stdout
        assert "`" not in text, argv
    assert "local/state/scrollback" in cli(None, "up", "--help").stdout
    assert "default 3600" in " ".join(cli(None, "gc", "--help").stdout.split())


def test_port_in_use_names_the_address_and_the_flag(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        up = cli(
            None,
            "up",
            "--transcripts", str(root), "--state", str(tmp_path / "s"),
            "--history-addr", addr, "--media-addr", f"127.0.0.1:{free_port()}",
        )  # fmt: skip
        assert up.returncode == 2, up.stderr
        assert addr in up.stderr and "--history-addr" in up.stderr and "in use" in up.stderr
        assert "GRPC_VERBOSITY" not in up.stderr and "Traceback" not in up.stderr
        service = subprocess.run(
            [sys.executable, "-m", "media_service", "--transcripts", str(root),
             "--state", str(tmp_path / "s"), "--addr", addr],
            capture_output=True, text=True, env=cli_env(), timeout=60, check=False,
        )  # fmt: skip
        assert service.returncode == 2 and addr in service.stderr and "--addr" in service.stderr


def test_config_errors_exit_2_without_a_class_name(tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    media = subprocess.run(
        [sys.executable, "-m", "media_service", "--transcripts", missing,
         "--state", str(tmp_path / "s"), "--addr", "127.0.0.1:0"],
        capture_output=True, text=True, env=cli_env(), timeout=60, check=False,
    )  # fmt: skip
    assert media.returncode == 2 and "transcripts root" in media.stderr
    up = cli(None, "up", "--transcripts", missing, "--state", str(tmp_path / "s"))
    assert up.returncode == 2 and up.stderr.startswith("scrollback up: the transcripts root")
    assert "ConfigError" not in up.stderr and "Traceback" not in up.stderr
