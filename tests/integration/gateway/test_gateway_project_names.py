"""The viewer names a project as `scrollback sessions` does (Debian's Chromium via Playwright).

Claude Code names a project's directory by its path, every character but letters and digits
made a dash ("-src-experiments-claude-p"). The CLI shows the path's last component
(scrollback_app/cli_sessions.py `project_name`); the viewer's header shows the same, from the
`cwd` its entries were written in when the directory's name is that path's, else the
directory's last dash-separated words, as the CLI does for a path it cannot find. The
directory's name stays on hover.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from scrollback_app.cli_sessions import project_name
from tests.support.browser import open_page
from tests.support.gateway import GatewayStack

pytestmark = pytest.mark.browser


def _conversation(path: Path, session_id: str, cwd: str | None) -> None:
    extra = {} if cwd is None else {"cwd": cwd}
    rows = [
        {
            "type": "user",
            "uuid": f"{session_id}-u",
            "parentUuid": None,
            "sessionId": session_id,
            "timestamp": "2026-03-04T09:00:00.000Z",
            "message": {"role": "user", "content": f"what is in {session_id}"},
            **extra,
        },
        {
            "type": "assistant",
            "uuid": f"{session_id}-a",
            "parentUuid": f"{session_id}-u",
            "sessionId": session_id,
            "timestamp": "2026-03-04T09:00:05.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "a look"}]},
            **extra,
        },
    ]
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))


def _header_project(browser: Any, stack: GatewayStack, session_id: str) -> tuple[str, str]:
    page = open_page(browser, f"{stack.url}/sessions/{session_id}", ready="#where .project")
    project = page.locator("#where .project")
    return project.inner_text(), project.get_attribute("title") or ""


def test_the_header_shows_the_projects_last_path_component_as_the_cli_does(
    stack: GatewayStack, browser: Any, tmp_path: Path
) -> None:
    # A project whose path is on this machine: the CLI finds it, the viewer reads it from cwd.
    work = tmp_path / "src" / "experiments" / "claude-p"
    work.mkdir(parents=True)
    encoded = re.sub(r"[^A-Za-z0-9]", "-", str(work))
    assert project_name(encoded) == "claude-p"
    _conversation(stack.pair.transcript("with-cwd", project=encoded), "with-cwd", str(work))
    # No cwd in its entries and a path not on this machine: its last words, as the CLI's.
    elsewhere = "-nowhere-on-this-machine-experiments-claude-p"
    _conversation(stack.pair.transcript("no-cwd", project=elsewhere), "no-cwd", None)
    # A cwd that is not the directory's path (the agent moved) names nothing.
    moved = "-nowhere-else-app"
    _conversation(stack.pair.transcript("moved", project=moved), "moved", "/tmp/elsewhere")
    stack.start_gateway()

    assert _header_project(browser, stack, "with-cwd") == ("claude-p", encoded)
    shown, hover = _header_project(browser, stack, "no-cwd")
    assert (shown, hover) == (project_name(elsewhere), elsewhere)
    assert shown == "…claude-p"
    assert _header_project(browser, stack, "moved") == (project_name(moved), moved)
    assert project_name(moved) == "nowhere-else-app"

    # The list has no entries to read: each project by its directory's last words, never raw.
    page = open_page(browser, f"{stack.url}/", ready="li.session")
    listed = page.locator("li.session .project").all_inner_texts()
    assert project_name(elsewhere) in listed and project_name(moved) in listed
    assert all(len(name) <= 21 and not name.startswith("-") for name in listed), listed
    assert any(name.startswith("…") and name.endswith("claude-p") for name in listed), listed
    assert page.errors == []
