"""The CLI as a newcomer meets it in an 80-column terminal: the real `scrollback` command
in a pseudo-terminal, against real servers on 127.0.0.1 (a Codex sessions root beside
Claude Code's where a test needs one)."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.support.cli import SCROLLBACK, cli, cli_env, in_terminal
from tests.support.codex import Rollout, full_rollout, write_rollout
from tests.support.servers import ServerPair, png, user_line

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

COLUMNS = 80


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerPair]:
    """Both services over a Claude Code root and a Codex sessions root."""
    pair = ServerPair(tmp_path / "root", tmp_path / "state", codex=tmp_path / "codex" / "sessions")
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    try:
        pair.start_history(0)
        pair.start_media(0)
        yield pair
    finally:
        pair.close()


def _encoded(path: Path) -> str:
    """Claude Code's project directory name for a working directory."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def test_sessions_show_human_sizes_years_and_the_project_name(
    servers: ServerPair, tmp_path: Path
) -> None:
    work = tmp_path / "code" / "my-app"
    work.mkdir(parents=True)
    big = servers.transcript("b40ce4e5-1111-4a2b-9c3d-000000000001", project=_encoded(work))
    big.write_bytes(user_line("u1", "the big one", timestamp="2026-01-02T03:04:05Z")
                    + user_line("u2", "x" * 1_500_000))  # fmt: skip
    last_year = datetime.now(UTC).year - 1
    old = servers.transcript("0ld5e55i-2222-4a2b-9c3d-000000000002", project=_encoded(work))
    stamp = f"{last_year}-06-01T12:00:00Z"
    old.write_bytes(user_line("v1", "an old session", timestamp=stamp))
    moment = datetime(last_year, 6, 1, 12, tzinfo=UTC).timestamp()
    os.utime(old, (moment, moment))
    rollout = Rollout("0199a7c2-5b1e-7d30-9c4f-3f2a6e8b1d21")
    rollout.meta(cwd="/home/dev/codex-proj")
    rollout.user("a codex question", [])
    write_rollout(tmp_path / "codex" / "sessions", rollout)

    code, out = in_terminal(servers, COLUMNS, "sessions")
    assert code == 0, out
    assert all(len(line) <= COLUMNS for line in out.splitlines()), out
    assert "1.5 MB" in out, out
    assert not re.search(r"\d,\d{3}", out), f"sizes in raw bytes:\n{out}"
    assert f"{last_year}-06-01" in out, out
    assert "my-app" in out and "-..." not in out, out
    assert "codex codex-proj" in out and "co..." not in out, out


def test_sessions_show_when_the_conversation_was_active_not_when_its_file_was_touched(
    servers: ServerPair,
) -> None:
    last_year = datetime.now(UTC).year - 1
    touched = servers.transcript("70ced000-3333-4a2b-9c3d-000000000003")
    touched.write_bytes(
        user_line("t1", "a touched session", timestamp=f"{last_year}-03-01T12:00:00Z")
    )
    # Touched (or copied without -p) today: its file is new, its conversation is not.
    code, out = in_terminal(servers, COLUMNS, "sessions")
    assert code == 0, out
    assert f"{last_year}-03-01" in out, out
    assert "active" in out, out


def test_a_command_typo_gets_a_suggestion(servers: ServerPair) -> None:
    result = cli(servers, "windw", "some-session")
    assert result.returncode == 2, result.stderr
    assert "did you mean `scrollback window`?" in result.stderr, result.stderr


def test_a_unique_prefix_of_8_characters_names_its_session(servers: ServerPair) -> None:
    for n, session in enumerate(("b40ce4e5-aaaa-4a2b-9c3d-000000000001",
                                 "77aa11bb-cccc-4a2b-9c3d-000000000002",
                                 "77aa11bb-dddd-4a2b-9c3d-000000000003")):  # fmt: skip
        servers.transcript(session).write_bytes(user_line(f"u{n}", f"prompt number {n}"))
    code, out = in_terminal(servers, COLUMNS, "window", "b40ce4e5")
    assert code == 0, out
    assert "prompt number 0" in out, out
    assert cli(servers, "session", "b40ce4e5", "--json").returncode == 0
    short = cli(servers, "window", "b40ce4e")  # 7 characters: too short to be a prefix
    assert short.returncode == 3 and "NOT_FOUND" in short.stderr, short.stderr
    ambiguous = cli(servers, "window", "77aa11bb")
    assert ambiguous.returncode == 2, ambiguous.stderr
    assert "2 sessions start with 77aa11bb" in ambiguous.stderr, ambiguous.stderr
    assert "77aa11bb-cccc" in ambiguous.stderr and "77aa11bb-dddd" in ambiguous.stderr


@pytest.mark.parametrize("command", ["sessions", "window", "images", "slim", "media", "send"])
def test_help_starts_with_what_the_command_does_with_connection_flags_apart(
    servers: ServerPair, command: str
) -> None:
    code, out = in_terminal(servers, COLUMNS, command, "--help")
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].startswith(f"usage: scrollback {command}") and lines[0].endswith("[options]")
    assert re.match(r"[A-Z][^-]", lines[1]), f"no description after the usage line:\n{out}"
    own, connection = out.replace("\r", "").split("\nconnection:\n", 1)
    assert "--tls-ca" in connection and "--history-addr" in connection
    assert "--tls-ca" not in own and "--history-addr" not in own, out


def _header_only_png(width: int, height: int) -> bytes:
    """A PNG whose header declares `width` x `height` (its pixels never decoded here)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(b"\x00" * 4000))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + idat + chunk(b"IEND", b"")


def test_images_is_a_table_that_fits_and_refs_come_on_request(servers: ServerPair) -> None:
    session = "5e55104a-0000-4a2b-9c3d-00000000000a"
    huge = _header_only_png(9000, 9000)
    first = orjson.loads(user_line("a1", "look at these", images=(png(1, 60), huge)))
    second = orjson.loads(user_line("a2", "and this one", images=(png(2, 60),)))
    second["parentUuid"] = "a1"
    servers.transcript(session).write_bytes(
        orjson.dumps(first) + b"\n" + orjson.dumps(second) + b"\n"
    )
    code, out = in_terminal(servers, COLUMNS, "images", session)
    assert code == 0, out
    assert all(len(line) <= COLUMNS for line in out.splitlines()), out
    rows = [line.strip() for line in out.splitlines() if line.strip().startswith("messages.")]
    assert len(rows) == 3, out
    assert re.match(r"messages\.0\.content\.2\s+png\s+9000x9000\s+\d+ k?B\s+over 8000 px", rows[1])
    assert session not in out and "--pin" not in out, "refs only on request:\n" + out
    assert "3 images (1 with problems)" in out, out
    code, out = in_terminal(servers, COLUMNS, "images", session, "--refs")
    assert code == 0, out
    assert f"messages.0.content.1  {session}/a1/0 --pin " in out.replace("\r", ""), out


def test_images_and_slim_run_in_process_when_no_service_answers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    projects = home / ".claude" / "projects" / "-home-me-app"
    projects.mkdir(parents=True)
    session = "10ca1000-0000-4a2b-9c3d-00000000000b"
    (projects / f"{session}.jsonl").write_bytes(
        user_line("l1", "a screenshot", images=(png(3, 60),))
    )
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{unused.getsockname()[1]}"
    env = {"HOME": str(home), "SCROLLBACK_HISTORY_ADDR": nobody, "SCROLLBACK_MEDIA_ADDR": nobody}
    listed = cli(None, "images", session, **env)
    assert listed.returncode == 0, listed.stderr
    assert "1 images (0 with problems)" in listed.stdout, listed.stdout
    assert f"no history service answers at {nobody}" in listed.stderr
    assert "--local" in listed.stderr
    forked = cli(None, "slim", session, "--fork", "--install", **env)
    assert forked.returncode == 0, forked.stderr
    copies = [p for p in projects.glob("*.jsonl") if p.name != f"{session}.jsonl"]
    assert len(copies) == 1 and b"image cut by scrollback slim" in copies[0].read_bytes()
    forced = cli(None, "images", session, "--local", "--json", **env)
    assert forced.returncode == 0 and '"images"' in forced.stdout, forced.stderr
    assert forced.stderr == "", "the in-process service logs nothing:\n" + forced.stderr


def test_a_history_service_elsewhere_is_never_replaced_by_local_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects" / "p").mkdir(parents=True)
    (home / ".claude" / "projects" / "p" / "s.jsonl").write_bytes(user_line("x", "hi"))
    result = cli(None, "images", "s", "--timeout", "2", HOME=str(home),
                 SCROLLBACK_HISTORY_ADDR="192.0.2.1:50051")  # fmt: skip
    assert result.returncode == 1 and "UNAVAILABLE" in result.stderr, result.stderr


def _codex_session(tmp_path: Path) -> str:
    rollout = full_rollout("0199a7c2-5b1e-7d30-9c4f-3f2a6e8b1d99")
    rollout.add(
        "event_msg", {"type": "agent_message", "message": "The albatross button is misaligned."}
    )
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    return rollout.session_id


def test_window_reads_a_codex_rollout_as_claude_code(servers: ServerPair, tmp_path: Path) -> None:
    session = _codex_session(tmp_path)
    code, out = in_terminal(servers, COLUMNS, "window", session, "--page-size", "50")
    assert code == 0, out
    assert all(len(line) <= COLUMNS for line in out.splitlines()), out
    flat = " ".join(out.split())
    assert "view_image shot.png" in flat and '"command"' not in out, out
    assert "token_count" not in out and "[event" not in out, out
    assert flat.count("albatross button is misaligned") == 1, out
    assert flat.count("look at the flamingo screenshot") == 1, out
    assert re.search(r"\bassistant\b", out) and "response_item" not in out, out


def test_tail_prints_each_codex_message_once(servers: ServerPair, tmp_path: Path) -> None:
    session = _codex_session(tmp_path)
    env = cli_env(SCROLLBACK_HISTORY_ADDR=servers.history_addr,
                  SCROLLBACK_MEDIA_ADDR=servers.media_addr)  # fmt: skip
    process = subprocess.Popen([SCROLLBACK, "tail", session, "--last", "50"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        printed = []
        deadline = time.monotonic() + 30
        while not any("[compacted]" in line for line in printed):  # the last line shown
            line = process.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(printed)
            printed.append(line)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    out = "".join(printed) + rest
    assert out.count("albatross button is misaligned") == 1, out
    assert out.count("look at the flamingo screenshot") == 1, out
    assert "token_count" not in out, out
