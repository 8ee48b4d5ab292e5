"""The CLI over a Gemini CLI session: the sessions table marks its source, the window's text
summary reads its messages, and the HTML export writes its text and its photos' files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrollback_app.cli import main
from tests.support.gemini import full_session, images_of, write_session
from tests.support.servers import ServerPair

SESSION = "7d3f6a52-1c2b-4e8f-9a0d-3b5c7e9f1a24"


@pytest.fixture
def gemini_servers(tmp_path: Path) -> Iterator[ServerPair]:
    pair = ServerPair(tmp_path / "root", tmp_path / "state", gemini=tmp_path / "gemini")
    try:
        pair.start_history(0)
        pair.start_media(0)
        yield pair
    finally:
        pair.close()


def _run(capsys: pytest.CaptureFixture[str], pair: ServerPair, *argv: str) -> str:
    command, *rest = argv
    addrs = ["--history-addr", pair.history_addr, "--media-addr", pair.media_addr]
    code = main([command, *addrs, *rest])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_the_cli_lists_reads_and_exports_a_gemini_session(
    capsys: pytest.CaptureFixture[str],
    gemini_servers: ServerPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # every column of the table on one line
    session = full_session(SESSION)
    write_session(tmp_path / "gemini", session)
    table = _run(capsys, gemini_servers, "sessions")
    # The project column says the source and the project's last path component.
    assert SESSION in table and "gemini gemini-proje" in table
    window = _run(capsys, gemini_servers, "window", SESSION)
    assert "what is in this photo? [image]" in window
    assert "[thinking] Looking It is a photo of a cat." in window
    assert "[tool read_many_files]" in window and "start over" not in window
    target = tmp_path / "export"
    summary = json.loads(
        _run(capsys, gemini_servers, "export", SESSION, "--html", str(target), "--json")
    )
    assert summary["entries"] == len(session.messages) and summary["images"] == 3
    page = (target / "index.html").read_text()
    assert "It is a photo of a cat." in page and page.count('<img loading="lazy" src="media/') == 3
    files = {p.read_bytes() for p in (target / "media").iterdir()}
    assert files == {image for m in session.messages.values() for image in images_of(m)}
