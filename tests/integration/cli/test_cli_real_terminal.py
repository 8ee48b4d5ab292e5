"""The CLI in a real terminal: tables laid out for 80 columns, errors that say what happened.

Every test runs the installed console script as a subprocess, against real
servers; where the terminal's width matters, in a pseudo-terminal.
"""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from client import Client
from scrollback_app.cli_sessions import human_size
from tests.support.cli import LONG_IDS, SCROLLBACK, cli, cli_env, in_terminal
from tests.support.security import ServerProcess
from tests.support.servers import ServerPair, free_port, png, user_line
from tests.support.workers import WorkerService

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

TITLES = [
    "Explore the code organization of the viewer project",
    "Use the Explore task in sub-agents to map the services",
]
PROJECT = "-Users-someone-workspace-a-rather-long-project-name"


def _sessions(pair: ServerPair) -> None:
    for n, (session, title) in enumerate(zip(LONG_IDS, TITLES, strict=True)):
        pair.transcript(session, project=PROJECT).write_bytes(
            user_line(f"u{n}", title) + user_line(f"v{n}", "more words " * 40)
        )


def _indexed(pair: ServerPair, query: str, hits: int) -> None:
    """Wait until the search index has `hits` hits for `query` (indexing runs in the background)."""
    deadline = time.monotonic() + 15
    with Client(pair.history_addr, pair.media_addr) as sb:
        while len(sb.history.search(query).hits) < hits:
            assert time.monotonic() < deadline, "not indexed in time"
            time.sleep(0.05)


@pytest.mark.parametrize("columns", [80, 100, 140])
def test_sessions_show_whole_ids_and_the_titles_at_any_width(
    cli_servers: ServerPair, columns: int
) -> None:
    _sessions(cli_servers)
    code, out = in_terminal(cli_servers, columns, "sessions")
    assert code == 0, out
    assert all(len(line) <= columns for line in out.splitlines()), out
    for session, title in zip(LONG_IDS, TITLES, strict=True):
        assert session in out, out
        # The title's first 30 characters at least, and the size, somewhere in the row.
        assert title[:30] in out, f"title cut at {columns} columns:\n{out}"
    size = cli_servers.transcript(LONG_IDS[0], project=PROJECT).stat().st_size
    assert human_size(size) in out, f"size dropped at {columns} columns:\n{out}"


@pytest.mark.parametrize("columns", [80, 140])
def test_search_shows_the_snippet_with_its_words_marked(
    cli_servers: ServerPair, columns: int
) -> None:
    _sessions(cli_servers)
    _indexed(cli_servers, "Explore", 2)
    code, raw = in_terminal(cli_servers, columns, "search", "Explore", raw=True)
    assert code == 0, raw
    _, out = in_terminal(cli_servers, columns, "search", "Explore")
    # The table fits; the hint under it is one line whatever the width, to copy whole.
    table = [line for line in out.splitlines() if not line.startswith("open #1:")]
    assert all(len(line) <= columns for line in table), out
    for session in LONG_IDS:
        assert session in out, out
    # Both snippets, their first words on one line, the matched word in reverse video.
    assert "Explore the code organization" in out, f"no snippet at {columns} columns:\n{out}"
    assert "Use the Explore task" in out, f"no snippet at {columns} columns:\n{out}"
    assert raw.count("\x1b[1;7mExplore\x1b[0m") == 2, raw


@pytest.mark.parametrize("columns", [80, 140])
def test_window_gives_the_text_the_room(cli_servers: ServerPair, columns: int) -> None:
    text = "the text a reader came for, forty-five wide"
    cli_servers.transcript("w").write_bytes(
        user_line("first-uuid", text, timestamp="2026-05-01T10:00:00.000Z")
        + user_line("second-uuid", "with a photo", images=(png(3, 120),))
    )
    code, out = in_terminal(cli_servers, columns, "window", "w")
    assert code == 0, out
    table = [line for line in out.splitlines() if not line.startswith("photo refs")]
    assert all(len(line) <= columns for line in table), out
    assert text in out, f"text folded at {columns} columns:\n{out}"
    assert "2026-05-01 10:00:00" in out and "first-u" in out and "second-" in out


def test_a_typod_flag_shows_the_commands_usage_and_the_closest_flag() -> None:
    window = cli(None, "window", "S", "--page-szie", "5")
    assert window.returncode == 2
    assert window.stderr.startswith("usage: scrollback window "), window.stderr
    assert "did you mean --page-size?" in window.stderr
    joined = cli(None, "sessions", "--jsno=1")
    assert joined.returncode == 2 and joined.stderr.startswith("usage: scrollback sessions ")
    assert "did you mean --json?" in joined.stderr
    stray = cli(None, "sessions", "extra")
    assert stray.returncode == 2 and stray.stderr.startswith("usage: scrollback sessions ")
    assert "did you mean" not in stray.stderr


def test_every_server_command_says_port_in_use_alike_and_exits_2(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        runs = {
            "--addr or SCROLLBACK_GATEWAY_ADDR": [
                cli(None, "gateway", "--addr", addr),
                _module("gateway", "--addr", addr),
            ],
            "--addr or SCROLLBACK_HISTORY_ADDR": [
                _module(
                    "history_service",
                    "--transcripts",
                    str(root),
                    "--state",
                    str(tmp_path / "s"),
                    "--addr",
                    addr,
                    "--workers",
                    "1",
                ),
            ],
            "--history-addr or SCROLLBACK_HISTORY_ADDR": [
                cli(
                    None,
                    "up",
                    "--transcripts",
                    str(root),
                    "--state",
                    str(tmp_path / "s"),
                    "--history-addr",
                    addr,
                    "--media-addr",
                    f"127.0.0.1:{free_port()}",
                    "--workers",
                    "1",
                ),
            ],
        }
        for moved_by, results in runs.items():
            for result in results:
                assert result.returncode == 2, result.stderr
                line = (
                    f"cannot listen on {addr}: the port is in use; choose another with {moved_by}"
                )
                assert result.stderr.strip().endswith(line), result.stderr
                assert "Error" not in result.stderr and "Traceback" not in result.stderr
    exposed = cli(None, "gateway", "--addr", "0.0.0.0:0")
    assert exposed.returncode == 2 and "--insecure" in exposed.stderr
    assert "Error" not in exposed.stderr


def _module(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", name, *argv],
        capture_output=True, text=True, env=cli_env(), timeout=60, check=False,
    )  # fmt: skip


def test_send_image_refuses_what_is_not_an_image_and_file_sends_it(
    cli_servers: ServerPair, tmp_path: Path
) -> None:
    cli_servers.transcript("s").write_bytes(user_line("u0", "hello"))
    fake = tmp_path / "fake.png"
    fake.write_text("just some text, named like a picture\n")
    opaque = tmp_path / "hostname"
    opaque.write_bytes(b"\x00\x01machine\n")
    for path in (fake, opaque):
        refused = cli(cli_servers, "send", "s", "look", "--image", str(path))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "is not an image" in refused.stderr
        assert f"--file {path}" in refused.stderr and refused.stdout == ""
    with Client(cli_servers.history_addr, cli_servers.media_addr) as sb:
        header = sb.history.bootstrap("s").header
        assert header is not None and not header.pending  # nothing was sent

    photo = tmp_path / "photo.png"
    photo.write_bytes(png(9, 40))
    sent = cli(cli_servers, "send", "s", "both", "--image", str(photo), "--file", str(fake))
    assert sent.returncode == 0, sent.stderr
    refs = re.findall(r"media:[0-9a-f]{64}", sent.stdout)
    assert refs == [
        f"media:{hashlib.sha256(photo.read_bytes()).hexdigest()}",
        f"media:{hashlib.sha256(fake.read_bytes()).hexdigest()}",
    ], sent.stdout
    lines = sent.stdout.splitlines()
    assert "image/png" in lines[1] and "photo.png" in lines[1]
    assert "image/" not in lines[2] and "fake.png" in lines[2]  # declared by its bytes
    for ref, original in zip(refs, (photo, fake), strict=True):
        out = tmp_path / "out.bin"
        fetched = cli(cli_servers, "media", ref, "-o", str(out))
        assert fetched.returncode == 0, fetched.stderr
        assert out.read_bytes() == original.read_bytes()


def _lines_until(lines: list[str], pattern: str, count: int) -> list[str]:
    """The lines matching `pattern` once `count` of them have come (a 30 s deadline)."""
    deadline = time.monotonic() + 30
    while len(found := [line for line in lines if re.search(pattern, line)]) < count:
        assert time.monotonic() < deadline, "".join(lines[-20:])
        time.sleep(0.05)
    return found


def test_start_up_lines_name_host_port_the_url_and_the_worker(
    tmp_path: Path, cli_servers: ServerPair
) -> None:
    root = tmp_path / "own-root"
    root.mkdir()
    for module, service in (("history_service", "history"), ("media_service", "media")):
        server = ServerProcess(module, root, tmp_path / "own-state")
        try:
            line = _lines_until(server.lines, "listening on", 1)[0]
            assert f"{service} service listening on 127.0.0.1:{server.port}" in line, line
            assert "worker" not in line
        finally:
            server.terminate()
    tree = WorkerService("history_service", root, tmp_path / "own-state", workers=2)
    try:
        workers = _lines_until(tree.lines, r"\(worker [12] of 2, pid \d+\)", 2)
        for line in workers:
            assert f"history service listening on 127.0.0.1:{tree.port} (worker " in line
        assert len({re.search(r"pid (\d+)", line).group(1) for line in workers}) == 2  # type: ignore[union-attr]
        assert any(f"2 workers listening on 127.0.0.1:{tree.port}" in x for x in tree.lines)
    finally:
        tree.stop()
    gateway = subprocess.Popen(
        [SCROLLBACK, "gateway", "--addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env(SCROLLBACK_HISTORY_ADDR=cli_servers.history_addr,
                    SCROLLBACK_MEDIA_ADDR=cli_servers.media_addr),
    )  # fmt: skip
    try:
        assert gateway.stdout is not None
        opened = re.search(
            r"open the viewer at (http://127\.0\.0\.1:\d+/)", gateway.stdout.readline()
        )
        assert opened is not None
        with urllib.request.urlopen(opened.group(1), timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        gateway.terminate()
        _, stderr = gateway.communicate(timeout=30)
    assert f"gateway listening on {opened.group(1)[len('http://') : -1]}" in stderr


def test_a_malformed_id_is_usage_and_a_wrong_pin_says_so(cli_servers: ServerPair) -> None:
    for argv in (["window", "../../etc/passwd"], ["session", "a b"], ["tail", "x" * 65]):
        refused = cli(cli_servers, *argv)
        assert refused.returncode == 2, (argv, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "[A-Za-z0-9_-]{1,64}" in refused.stderr
    cli_servers.transcript("ph").write_bytes(user_line("p0", "a photo", images=(png(5, 120),)))
    with Client(cli_servers.history_addr, cli_servers.media_addr) as sb:
        ref = sb.history.read_window("ph").entries[0].media_refs[0]
    uri = f"{ref.session_id}/{ref.entry_uuid}/{ref.index}"
    typo = ref.pin[:-1] + ("0" if ref.pin[-1] != "0" else "1")
    wrong = cli(cli_servers, "media", uri, "--pin", typo, "-o", "-")
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1
    assert "the pin does not match" in wrong.stderr and "minted" not in wrong.stderr
