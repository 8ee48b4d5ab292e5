"""The `scrollback` client commands against real services: output, --json and exit codes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scrollback_app.cli import main
from tests.support.servers import ServerPair, assistant_line, png, user_line


def run(capsys: pytest.CaptureFixture[str], pair: ServerPair, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process against the pair; (exit code, stdout, stderr)."""
    addrs = ["--history-addr", pair.history_addr, "--media-addr", pair.media_addr]
    command, *rest = argv
    code = main([command, *addrs, *rest])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], pair: ServerPair, *argv: str) -> Any:
    code, out, err = run(capsys, pair, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _session(pair: ServerPair) -> None:
    pair.transcript("c1").write_bytes(
        user_line("u0", "<script>alert(1)</script> & hello", timestamp="2026-05-01T10:00:00.000Z")
        + assistant_line("a0", "hi back")
        + b"".join(user_line(f"u{n}", f"q{n}") for n in range(1, 30))
        + user_line("p0", "a photo", images=(png(4), png(4)))
    )


def test_sessions_and_window(capsys: pytest.CaptureFixture[str], cli_servers: ServerPair) -> None:
    _session(cli_servers)
    sessions = run_json(capsys, cli_servers, "sessions")
    assert [s["sessionId"] for s in sessions] == ["c1"] and sessions[0]["projectDir"] == "proj"
    code, out, _ = run(capsys, cli_servers, "sessions")
    assert code == 0 and "c1" in out

    latest = run_json(capsys, cli_servers, "window", "c1", "--page-size", "10")
    assert [e["uuid"] for e in latest["entries"]][-1] == "p0" and len(latest["entries"]) == 10
    older = run_json(
        capsys,
        cli_servers,
        "window",
        "c1",
        "--page-size",
        "10",
        "--older",
        latest["nextPageToken"],
    )
    assert [e["uuid"] for e in older["entries"]] == [f"u{n}" for n in range(11, 21)]
    first = run_json(capsys, cli_servers, "window", "c1", "--oldest-first", "--page-size", "2")
    assert [e["uuid"] for e in first["entries"]] == ["u0", "a0"]
    assert json.loads(first["entries"][0]["json"])["message"]["content"].startswith("<script>")
    refs = latest["entries"][-1]["mediaRefs"]
    assert [r["uri"] for r in refs] == ["c1/p0/0", "c1/p0/1"] and all(r["pin"] for r in refs)

    code, out, _ = run(capsys, cli_servers, "window", "c1", "--page-size", "10")
    assert code == 0 and "--older" in out and "photo refs" in out and "q29" in out


def test_errors_are_one_line_with_exit_codes(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    code, out, err = run(capsys, cli_servers, "window", "missing")
    assert code == 3 and out == ""
    assert err.startswith("scrollback: NOT_FOUND: ") and err.count("\n") == 1
    code, _, err = run(capsys, cli_servers, "window", "c1", "--older", "garbage")
    assert code in (2, 3) and err.startswith("scrollback: ")
    _session(cli_servers)
    code, _, err = run(capsys, cli_servers, "window", "c1", "--older", "garbage")
    assert code == 2 and err.startswith("scrollback: INVALID_ARGUMENT: ")
    code, _, err = run(capsys, cli_servers, "media", "not a ref", "-o", str(tmp_path / "x"))
    assert code == 2 and err.startswith("scrollback: usage: ")
    code, _, err = run(capsys, cli_servers, "send", "c1", "x", "--image", str(tmp_path / "none"))
    assert code == 2
    with pytest.raises(SystemExit) as usage:
        main(["window"])
    assert usage.value.code == 2
    capsys.readouterr()
    dead = ["--history-addr", "127.0.0.1:1", "--media-addr", "127.0.0.1:1", "--timeout", "1"]
    code = main(["sessions", *dead])
    _, err = capsys.readouterr()
    assert code == 1 and err.startswith("scrollback: UNAVAILABLE: ") and "Traceback" not in err


def test_media_send_and_gc(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    _session(cli_servers)
    ref = run_json(capsys, cli_servers, "window", "c1")["entries"][-1]["mediaRefs"][0]
    out_file = tmp_path / "photo.png"
    meta = run_json(
        capsys, cli_servers, "media", ref["uri"], "--pin", ref["pin"], "-o", str(out_file)
    )
    assert out_file.read_bytes() == png(4) and meta["contentType"] == "image/png"
    code, _, err = run(capsys, cli_servers, "media", ref["uri"], "--pin", "0" * 32, "-o", "-")
    assert code == 1 and err.startswith("scrollback: FAILED_PRECONDITION: ")

    image = tmp_path / "upload.png"
    image.write_bytes(png(5))
    accepted = run_json(capsys, cli_servers, "send", "c1", "see this", "--image", str(image))
    sha = hashlib.sha256(png(5)).hexdigest()
    assert accepted["text"] == "see this" and accepted["attachments"][0]["ref"] == f"media:{sha}"
    blob = run_json(capsys, cli_servers, "media", f"media:{sha}", "-o", str(tmp_path / "b.png"))
    assert blob["sha256"] == sha and (tmp_path / "b.png").read_bytes() == png(5)
    keyed = run_json(capsys, cli_servers, "send", "--chat-key", "k9", "first message")
    assert keyed["chatKey"] == "k9"
    code, out, _ = run(capsys, cli_servers, "send", "c1", "plain")
    assert code == 0 and out.startswith("accepted #")

    # gc: an unreferenced blob (uploaded, never accepted) goes; the referenced one stays
    from client import Client

    with Client(cli_servers.history_addr, cli_servers.media_addr) as sb:
        (orphan,) = sb.media.upload([b"orphan bytes"])
    code = main(["gc", "--state", str(cli_servers.state), "--grace", "0", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["deleted"] == [orphan.sha256]
    code = main(["gc", "--state", str(tmp_path / "nope")])
    assert code == 2 and capsys.readouterr().err.startswith("scrollback: usage: ")


def test_export_html(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    _session(cli_servers)
    target = tmp_path / "export"
    summary = run_json(capsys, cli_servers, "export", "c1", "--html", str(target))
    assert summary["entries"] == 32 and summary["media_files"] == 1 and summary["images"] == 2
    page = (target / "index.html").read_text()
    # The <noscript> fallback: escaped text, photos as lazy files.
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt; &amp; hello" in page and "<script>alert" not in page
    )
    assert page.count('<img loading="lazy" src="media/') == 2
    (photo,) = (target / "media").iterdir()
    assert photo.read_bytes() == png(4) and photo.suffix == ".png"
    assert photo.name in page
    # What the viewer's renderer draws (test_gateway_reader opens it in Chromium): the
    # entries in the canonical JSON mapping, each photo's ref with its file as `url`.
    data = (target / "session.js").read_text()
    assert data.startswith('"use strict";\nconst SCROLLBACK_EXPORT = ') and data.isascii()
    exported = json.loads(data.split(" = ", 1)[1].rstrip().removesuffix(";"))
    assert exported["session"]["sessionId"] == "c1" and len(exported["entries"]) == 32
    urls = [ref["url"] for e in exported["entries"] for ref in e["mediaRefs"]]
    assert urls == [f"media/{photo.name}"] * 2
    assert (target / "viewer" / "render.js").is_file()
    assert (target / "viewer" / "vendor" / "purify.LICENSE").is_file()


def test_tail_says_the_server_stopped_when_it_does(cli_servers: ServerPair) -> None:
    """The live events end because the server went away: tail says so, not a bare status."""
    cli_servers.transcript("t1").write_bytes(user_line("u0", "already there"))
    env = dict(os.environ, SCROLLBACK_HISTORY_ADDR=cli_servers.history_addr)
    process = subprocess.Popen(
        [sys.executable, "-m", "scrollback_app.cli", "tail", "t1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline())["uuid"] == "u0"
        cli_servers.stop_history(grace=0.5)
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 1, stderr
    assert stderr.count("\n") == 1 and "the server stopped" in stderr, stderr
    assert cli_servers.history_addr in stderr
    assert "CANCELLED: CANCELLED" not in stderr and "no history service answers" not in stderr


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_tail_prints_live_events_and_exits_0_on_ctrl_c(
    cli_servers: ServerPair, inherited: signal.Handlers
) -> None:
    """Also when started with SIGINT ignored, as a script's background job (or a test
    suite run as one) is: tail's Ctrl-C must not depend on what it inherited."""
    path = cli_servers.transcript("t1")
    path.write_bytes(user_line("u0", "already there"))
    env = dict(os.environ, SCROLLBACK_HISTORY_ADDR=cli_servers.history_addr)
    # A disposition set before exec is what the tail process inherits.
    launch = (
        "import os, signal, sys\n"
        f"signal.signal(signal.SIGINT, signal.{inherited.name})\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'scrollback_app.cli', *sys.argv[1:]])\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", launch, "tail", "t1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())
        assert first["event"] == "entry" and first["uuid"] == "u0"
        with path.open("ab") as handle:
            handle.write(user_line("u1", "live line"))
        live = json.loads(process.stdout.readline())
        assert live["uuid"] == "u1"
        from client import HistoryClient

        with HistoryClient(cli_servers.history_addr) as history:
            history.accept_message("accepted live", session_id="t1")
        accepted = json.loads(process.stdout.readline())
        assert accepted["event"] == "accepted" and accepted["text"] == "accepted live"
        time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        code = process.wait(10)
        assert process.stderr is not None
        stderr = process.stderr.read()
        assert code == 0, stderr
        assert "Traceback" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_session_totals_and_usage_column(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair
) -> None:
    def assistant(uuid: str, message_id: str, output: int) -> bytes:
        entry = {
            "type": "assistant",
            "uuid": uuid,
            "timestamp": "2026-05-01T10:00:00.000Z",
            "message": {
                "id": message_id,
                "model": "claude-opus-4-20250514",
                "usage": {"input_tokens": 1000, "output_tokens": output},
            },
        }
        return json.dumps(entry).encode() + b"\n"

    # m1 is written as two lines repeating its usage: counted once.
    cli_servers.transcript("t1").write_bytes(
        assistant("a1", "m1", 2000) + assistant("a2", "m1", 2000) + assistant("a3", "m2", 0)
    )
    info = run_json(capsys, cli_servers, "session", "t1")
    assert info["insight"]["usage"]["inputTokens"] == "2000"
    assert info["insight"]["usage"]["outputTokens"] == "2000"
    assert info["insight"]["entryCounts"] == [{"type": "assistant", "count": "3"}]
    assert info["insight"]["costUsd"] == pytest.approx((2000 * 15 + 2000 * 75) / 1e6)
    code, out, _ = run(capsys, cli_servers, "info", "t1")
    assert code == 0 and "in 2,000" in out and "$0.1800" in out and "claude-opus-4" in out
    listed = run_json(capsys, cli_servers, "sessions")
    assert listed[0]["insight"]["usage"]["outputTokens"] == "2000"
    code, out, _ = run(capsys, cli_servers, "sessions")
    assert code == 0 and "4k $0.18" in out
    code, _, err = run(capsys, cli_servers, "session", "nope")
    assert code != 0 and "not found" in err.lower()


def test_search(capsys: pytest.CaptureFixture[str], cli_servers: ServerPair) -> None:
    cli_servers.transcript("c1").write_bytes(
        user_line("u1", "where is the tangerine", timestamp="2026-05-01T10:00:00.000Z")
        + assistant_line("a1", "the tangerine is in the bowl")
        + user_line("u2", "thanks for the tangerine", timestamp="2026-05-01T11:00:00.000Z")
    )
    deadline = time.monotonic() + 15
    while True:
        found = run_json(capsys, cli_servers, "search", "tangerine")
        if len(found["hits"]) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [h["entryUuid"] for h in found["hits"]] == ["u2", "u1", "a1"]
    first = found["hits"][0]
    start, end = (first["snippet"]["highlights"][0][k] for k in ("start", "end"))
    assert first["snippet"]["text"][start:end] == "tangerine"
    only = run_json(capsys, cli_servers, "search", "tangerine", "--type", "assistant")
    assert [h["entryUuid"] for h in only["hits"]] == ["a1"]
    since = run_json(capsys, cli_servers, "search", "tangerine", "--since", "2026-05-01T10:30")
    assert [h["entryUuid"] for h in since["hits"]] == ["u2"]
    paged = run_json(capsys, cli_servers, "search", "tangerine", "--limit", "2")
    rest = run_json(
        capsys, cli_servers, "search", "tangerine", "--page-token", paged["nextPageToken"]
    )
    assert [h["entryUuid"] for h in rest["hits"]] == ["a1"]
    newest = run_json(capsys, cli_servers, "search", "tangerine", "--newest")
    stamps = [h["timestamp"] for h in newest["hits"]]
    assert len(stamps) == 3 and stamps == sorted(stamps, reverse=True)
    assert newest["partial"] is False
    # A token of one order is refused for the other.
    code, _, err = run(
        capsys,
        cli_servers,
        "search",
        "tangerine",
        "--newest",
        "--page-token",
        paged["nextPageToken"],
    )
    assert code != 0
    # The jump token opens the window ending at the hit.
    window = run_json(capsys, cli_servers, "window", "c1", "--older", first["windowPageToken"])
    assert window["entries"][-1]["uuid"] == "u2"
    code, out, _ = run(capsys, cli_servers, "search", "tangerine")
    assert code == 0 and "tangerine" in out and "scrollback window c1 --older" in out
    code, _, err = run(capsys, cli_servers, "search", "tangerine", "--since", "yesterday")
    assert code != 0 and "--since" in err
