"""`scrollback window` in an 80-column terminal shows a session's system lines (hook runs, a
compaction) as one-line notes, as the viewer does, never as empty rows."""

from __future__ import annotations

from tests.support.cli import in_terminal
from tests.support.reader import SESSION, reader_session
from tests.support.servers import ServerPair


def test_window_shows_system_lines_as_notes(cli_servers: ServerPair) -> None:
    reader_session(cli_servers.root)
    code, output = in_terminal(cli_servers, 80, "window", SESSION, "--page-size", "50")
    assert code == 0, output
    # The notes' words, wherever the 80 columns wrap them.
    words = " ".join(output.replace("│", " ").split())
    assert "Running PostToolUse:Edit..." in words
    assert "Stop hook [uv run pytest] completed" in words
    assert "Conversation compacted (50,000 tokens before)" in words
    assert sum(" system " in line for line in output.splitlines()) == 3, output
