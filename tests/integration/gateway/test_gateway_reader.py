"""What a reader sees in the viewer (Debian's Chromium via Playwright), over a session holding
each element (tests/support/reader.py): markdown rendered with highlighted code and links,
Claude Code's tags as commands and notes, ANSI colours as colours, hook and compaction lines,
tool calls as one line with their result, Edit as a diff, TodoWrite as a checklist, a Task
call linked to its sub-agent thread and back; times local with UTC on hover; the header's
title, project, span and figures kept current by live lines; `/`, `j`, `k` and Esc; dark mode
and a 390 px screen; axe-core finding nothing serious; every session reachable from the list,
sub-agents nested; search results by session opening on the marked word; error pages with
what to do. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.cli import cli
from tests.support.gateway import REPO, GatewayStack, artifacts_dir
from tests.support.reader import (
    PROJECT,
    SESSION,
    SUBAGENT,
    TASK_CALL,
    TITLE,
    WORD_IN_RESULT,
    assistant,
    reader_session,
)

pytestmark = pytest.mark.browser

AXE = REPO / ".tools" / "node_modules" / "axe-core" / "axe.min.js"
# What must never be visible: raw markdown, Claude Code's tags, escape characters.
RAW = (
    "## ",
    "**",
    "```",
    "<command-",
    "</",
    "<local-command",
    "<ide_opened_file",
    "\x1b",
    "[1m",
    "␛",
)


def _open(browser: Any, url: str, **context: Any) -> Any:
    page = browser.new_context(
        viewport=context.pop("viewport", {"width": 1100, "height": 900}), **context
    ).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    page.errors = errors
    return page


def _axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands."""
    if not AXE.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("axe-core is not installed (scripts/test installs it into .tools)")
        pytest.skip("axe-core is not installed (scripts/test installs it into .tools)")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        "async () => (await axe.run(document, { resultTypes: ['violations'] })).violations"
        ".map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 5)"
        ".map((n) => n.target.join(' ') + ': ' + n.failureSummary) }))"
    )
    found = [v for v in result if v["impact"] in ("serious", "critical")]
    for violation in found:
        print(violation)
    return found


def _visible_text(page: Any) -> str:
    return str(page.inner_text("main"))


def _colour(page: Any, selector: str, prop: str = "color") -> str:
    return str(page.eval_on_selector(selector, f"(n) => getComputedStyle(n).{prop}"))


def _wait_for_index(stack: GatewayStack, word: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if httpx.get(f"{stack.url}/api/v1/search", params={"q": word}).json()["hits"]:
            return
        time.sleep(0.1)
    raise AssertionError("the indexer did not catch up")


def test_a_reader_sees_rendered_messages_tags_tools_and_a_live_header(
    stack: GatewayStack, browser: Any
) -> None:
    session = reader_session(stack.pair.root)
    stack.start_gateway()
    _wait_for_index(stack, WORD_IN_RESULT)  # the sub-agent links come from the index
    # bypass_csp only so that the test can add axe-core's script; the page's own CSP is
    # checked by test_gateway_http.
    page = _open(browser, f"{stack.url}/sessions/{SESSION}", bypass_csp=True)
    page.wait_for_selector("#insight .fact")
    page.wait_for_selector(f"#call-{TASK_CALL} + .subagent-line .subagent-link")
    shots = artifacts_dir()
    page.screenshot(path=str(shots / "reader-session.png"), full_page=True)
    text = _visible_text(page)
    for raw in RAW:
        assert raw not in text, raw

    # Markdown: a heading, bold, a link, a list, Python highlighted in colour.
    assert page.inner_text(".md h2") == "Plan"
    assert page.inner_text(".md strong") == "login check"
    assert page.get_attribute(".md a", "href") == "https://example.com/docs"
    assert page.get_attribute(".md a", "rel") == "noopener noreferrer nofollow"
    assert page.locator(".md li").all_inner_texts()[:2] == ["read the handler", "fix the check"]
    assert page.get_attribute(".md pre code", "data-language") == "python"
    keyword = ".md pre code .hljs-keyword"
    assert page.inner_text(keyword) == "def"
    assert _colour(page, keyword) != _colour(page, ".md pre code")

    # The slash command with its argument and coloured output; the IDE note; the title.
    assert page.inner_text(".command .command-name") == "/model"
    assert page.inner_text(".command .command-args") == "opusplan"
    assert page.inner_text(".command .stdout") == "Set model to opusplan (ready)"
    assert page.inner_text(".stdout .ansi-bold") == "opusplan"
    assert _colour(page, ".stdout .ansi-fg-2") != _colour(page, ".command .stdout")
    assert page.inner_text(".note-ide").startswith(
        "IDE: The user opened the file /src/app/login.py"
    )
    assert page.inner_text("#title") == TITLE
    assert page.title() == f"{TITLE} · Scrollback"

    # Hook lines with their text; the compaction marked, its summary rendered.
    system = page.locator(".entry.system").all_inner_texts()
    assert any("Running PostToolUse:Edit..." in t for t in system)
    assert any("Stop hook [uv run pytest] completed" in t for t in system)
    assert "Conversation compacted (50,000 tokens before)" in page.inner_text(
        ".entry.system.compaction"
    )
    summary = page.locator(".entry.compaction details")
    assert (
        summary.locator("summary").inner_text() == "Summary of the conversation before compaction"
    )

    # Tool calls: one line each with the main argument, the result folded into the call.
    lines = page.locator("details.tool > summary").all_inner_texts()
    assert lines[0].startswith("Edit /src/app/login.py ✓")
    assert lines[1].startswith("Write /src/app/test_login.py ✓")
    assert lines[2].startswith("TodoWrite 1/3 done")
    assert lines[3].startswith("Bash uv run pytest -q ✗ error")
    assert lines[4].startswith("Task Find other login checks")
    edit = page.locator("details.tool").nth(0)
    edit.locator("summary").click()
    assert edit.locator(".diff-del").inner_text() == "-     return user.active"
    assert edit.locator(".diff-add").inner_text() == "+     return user.active and not user.locked"
    assert "has been updated" in edit.locator(".tool-result").inner_text()
    # The lines that held only results (five) or the command's output are folded away: a
    # call reads as one card, a command with its output as one.
    assert page.locator(".entry.folded").count() == 6
    todos = page.locator(".todos li")
    assert todos.all_inner_texts() == ["☑ Read the handler", "◐ Fix the check", "☐ Run the tests"]
    bash = page.locator("details.tool.failed-call")
    bash.locator("summary").click()
    assert _colour(page, "details.failed-call .ansi-fg-1") != _colour(
        page, "details.failed-call pre.output"
    )
    page.screenshot(path=str(shots / "reader-tools.png"), full_page=True)

    # Times: local and relative, the exact UTC on hover.
    stamp = page.locator(".entry.assistant .role time").first
    assert "T09:" not in stamp.inner_text() and "Z" not in stamp.inner_text()
    assert stamp.get_attribute("title") == "2026-03-04 09:02:00 UTC"
    where = page.inner_text("#where")
    assert PROJECT.strip("-") in where and PROJECT not in where

    # Keys: "/" focuses search, j and k move between messages, Esc leaves the box.
    page.keyboard.press("/")
    assert page.evaluate("() => document.activeElement.id") == "search-q"
    page.keyboard.press("Escape")
    assert page.evaluate("() => document.activeElement.id") != "search-q"
    page.evaluate("() => window.scrollTo(0, 0)")
    page.keyboard.press("j")
    first = page.evaluate("() => document.querySelector('.entry.current').dataset.uuid")
    page.keyboard.press("j")
    second = page.evaluate("() => document.querySelector('.entry.current').dataset.uuid")
    page.keyboard.press("k")
    assert page.evaluate("() => document.querySelector('.entry.current').dataset.uuid") == first
    assert first != second

    assert _axe(page) == []

    # A live line shows up and the header's figures follow it.
    entries_before = page.inner_text("#insight [data-fact='entries'] b")
    with session.path.open("ab") as transcript:
        transcript.write(
            orjson.dumps(
                {
                    "type": "user",
                    "uuid": "u-live",
                    "timestamp": "2026-03-04T09:30:00.000Z",
                    "message": {"role": "user", "content": "one more **thing**"},
                }
            )
            + b"\n"
        )
    # What a person typed is markdown too (line breaks kept).
    page.locator(".entry.user .md strong", has_text="thing").wait_for(timeout=15000)
    assert page.locator(".entry.user").last.locator(".md").inner_text() == "one more thing"
    page.wait_for_function(
        "(before) => document.querySelector(\"#insight [data-fact='entries'] b\").textContent"
        " !== before",
        arg=entries_before,
        timeout=15000,
    )
    assert int(page.inner_text("#insight [data-fact='entries'] b")) == int(entries_before) + 1
    assert "09:30" in page.get_attribute("#where .span time:last-child", "title")

    # The Task call leads to its sub-agent thread, and the thread back to the call.
    page.click(f"details.tool[data-tool-use-id='{TASK_CALL}'] + .subagent-line a")
    page.wait_for_url(f"**/sessions/{SUBAGENT}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("#where .parent-link")
    assert "One more in admin.py." in _visible_text(page)
    page.click("#where .parent-link")
    page.wait_for_url(f"**/sessions/{SESSION}#call-{TASK_CALL}")
    page.wait_for_selector(f"details.tool.linked[open][data-tool-use-id='{TASK_CALL}']")
    assert page.errors == []


def test_dark_mode_and_a_390_px_screen(stack: GatewayStack, browser: Any) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway()
    page = _open(
        browser,
        f"{stack.url}/sessions/{SESSION}",
        viewport={"width": 390, "height": 844},
        color_scheme="dark",
        bypass_csp=True,
    )
    page.wait_for_selector("#insight .fact")
    page.screenshot(path=str(artifacts_dir() / "reader-dark-390.png"))
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    rgb = [int(part) for part in background.removeprefix("rgb(").rstrip(")").split(",")]
    assert sum(rgb) < 120, background  # dark
    text = page.evaluate("() => getComputedStyle(document.body).color")
    assert sum(int(p) for p in text.removeprefix("rgb(").rstrip(")").split(",")) > 600, text
    # Nothing wider than the screen; the search box clears the header's figures.
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    boxes = page.evaluate(
        """() => ['#search-q', '#insight', '#where', '#title'].map((s) => {
             const r = document.querySelector(s).getBoundingClientRect();
             return [r.left, r.top, r.right, r.bottom]; })"""
    )
    search = boxes[0]
    for other in boxes[1:]:
        overlap = not (
            search[2] <= other[0]
            or other[2] <= search[0]
            or search[3] <= other[1]
            or other[3] <= search[1]
        )
        assert not overlap, (search, other)
    assert search[2] <= 390
    # Code keeps its colours in the dark.
    assert (
        page.eval_on_selector(".md pre code .hljs-keyword", "(n) => getComputedStyle(n).color")
        != text
    )
    assert _axe(page) == []


def test_every_session_is_reachable_from_the_list_with_sub_agents_nested(
    stack: GatewayStack, browser: Any
) -> None:
    reader_session(stack.pair.root)
    total = 130
    for number in range(total):
        path = stack.pair.transcript(
            f"s{number:03d}", project="-home-dev-other" if number % 2 else "proj"
        )
        path.write_bytes(
            orjson.dumps(
                {
                    "type": "user",
                    "uuid": f"u{number}",
                    "timestamp": "2026-03-01T08:00:00Z",
                    "message": {
                        "role": "user",
                        "content": f"<ide_selection>x</ide_selection>task number {number}",
                    },
                }
            )
            + b"\n"
        )
        os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))
    stack.start_gateway()
    page = _open(browser, f"{stack.url}/", bypass_csp=True)
    # Later pages load as the reader scrolls to the end of the list.
    for _ in range(20):
        if page.locator("li.session").count() == total + 2:
            break
        page.evaluate("() => window.scrollTo(0, document.scrollingElement.scrollHeight)")
        page.wait_for_timeout(200)
    assert page.locator("li.session").count() == total + 2  # with the reader's and its sub-agent
    page.screenshot(path=str(artifacts_dir() / "reader-list.png"))
    titles = page.locator(".session-list > li.session > a .session-title").all_inner_texts()
    # Newest first (the reader's session was written last), titles without tags.
    assert titles[0] == TITLE
    assert titles[1:4] == ["task number 129", "task number 128", "task number 127"]
    assert not any("<" in title for title in titles)
    nested = page.locator(f"li.session[data-session-id='{SESSION}'] ul.subagents li.subagent")
    assert nested.count() == 1 and "sub-agent" in nested.inner_text()
    facts = page.inner_text(f"li.session[data-session-id='{SESSION}'] > a .session-facts")
    assert "19 entries" in facts and "$" in facts and "1 sub-agent" in facts
    assert _axe(page) == []

    page.select_option("#project-filter", "-home-dev-other")
    page.wait_for_function("() => document.querySelectorAll('li.session').length === 65")
    # Each project by its last path component (as the CLI names it), its directory on hover.
    assert set(page.locator(".session-facts .project").all_inner_texts()) == {"home-dev-other"}
    assert page.locator(".session-facts .project").first.get_attribute("title") == "-home-dev-other"


def test_a_search_hit_inside_a_tool_result_opens_expanded_and_marked(
    stack: GatewayStack, browser: Any
) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway()
    _wait_for_index(stack, WORD_IN_RESULT)
    page = _open(browser, f"{stack.url}/?q={WORD_IN_RESULT}", bypass_csp=True)
    group = page.locator(".hit-group")
    assert group.count() == 1
    assert group.locator("h2").inner_text() == TITLE
    assert group.locator(".hit-count").inner_text() == "1 hit"
    assert group.locator(".project").inner_text() == PROJECT.strip("-")
    assert group.locator("time").count() >= 1
    assert _axe(page) == []
    page.click(".hit-link")
    page.wait_for_selector("mark.found")
    mark = page.locator("mark.found").first
    assert mark.inner_text() == WORD_IN_RESULT
    assert mark.is_visible()
    assert page.evaluate(
        "() => { const r = document.querySelector('mark.found').getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= innerHeight; }"
    )
    # It sits in the Bash call's result, the call opened.
    assert page.evaluate("() => document.querySelector('mark.found').closest('details.tool').open")
    page.screenshot(path=str(artifacts_dir() / "reader-search-hit.png"))


def test_error_pages_say_what_happened_and_what_to_do(stack: GatewayStack, browser: Any) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway()
    page = _open(browser, f"{stack.url}/sessions/no-such-session")
    assert page.inner_text(".error-page h1") == "Not found"
    assert "No session with this id is visible to you" in page.inner_text(".error-page")
    assert page.get_attribute(".error-page a", "href") == "/"
    stack.pair.stop_history()
    page = _open(browser, f"{stack.url}/")
    assert page.inner_text(".error-page h1") == "A service is not answering"
    assert "scrollback up" in page.inner_text(".error-page .hint")
    page.screenshot(path=str(artifacts_dir() / "reader-error.png"))


def test_the_send_box_says_what_it_does(stack: GatewayStack, browser: Any) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway()
    page = _open(browser, f"{stack.url}/sessions/{SESSION}")
    # No program follows this session: the box is one line that opens it.
    page.click("#send-open")
    label = page.inner_text("#send label")
    assert label == "Queue a message"
    assert "not sent to Claude" in page.inner_text("#send-help")
    page.fill("#send-text", "ping from the page")
    page.click("#send button")
    page.wait_for_function("() => document.getElementById('send-result').textContent === 'queued'")
    page.get_by_text("ping from the page").wait_for(timeout=15000)
    assert "queued for the session's process" in page.inner_text(".entry.accepted")
    # A recent time reads relative, the exact UTC on hover.
    stamp = page.locator(".entry.accepted .role time")
    assert stamp.inner_text() == "just now" and stamp.get_attribute("title").endswith(" UTC")


def test_a_missing_token_says_how_to_give_one(stack: GatewayStack, browser: Any) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway(auth=True)
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.dismiss())  # the reader cancels the token prompt
    page.goto(f"{stack.url}/sessions/{SESSION}")
    page.wait_for_selector("body[data-ready='1']")
    assert page.inner_text(".error-page h1") == "A token is needed"
    assert "bearer token" in page.inner_text(".error-page .hint")


def test_no_transcript_markup_runs(stack: GatewayStack, browser: Any) -> None:
    """Markdown and tags are parsed, never executed: HTML in a message is shown as text and a
    javascript: link is dropped, with the page's CSP in force."""
    payload = (
        "<img src=x onerror=\"document.body.dataset.pwned='1'\"> "
        "[click](javascript:document.body.dataset.pwned='2') "
        "<script>document.body.dataset.pwned='3'</script>"
    )
    path = stack.pair.transcript("xss-session")
    path.write_bytes(
        orjson.dumps(
            {
                "type": "assistant",
                "uuid": "a1",
                "message": {"role": "assistant", "content": [{"type": "text", "text": payload}]},
            }
        )
        + b"\n"
        + orjson.dumps(
            {
                "type": "user",
                "uuid": "u1",
                "message": {
                    "role": "user",
                    "content": f"<local-command-stdout>{payload}</local-command-stdout>",
                },
            }
        )
        + b"\n"
    )
    stack.start_gateway()
    page = _open(browser, f"{stack.url}/sessions/xss-session")
    page.wait_for_timeout(300)
    assert page.evaluate("() => document.body.dataset.pwned") is None
    assert page.locator("main img, main script").count() == 0
    assert page.locator("main a[href^='javascript']").count() == 0
    assert "<img src=x onerror=" in page.inner_text(".entry.assistant")
    assert "<script>" in page.inner_text(".entry.user")


def test_the_html_export_reads_as_the_viewer_does(
    stack: GatewayStack, browser: Any, tmp_path: Path
) -> None:
    """`scrollback export --html` draws the session with the viewer's renderer, from files."""
    reader_session(stack.pair.root)
    target = tmp_path / "export"
    done = cli(stack.pair, "export", SESSION, "--html", str(target))
    assert done.returncode == 0, done.stderr
    page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto((target / "index.html").as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.screenshot(path=str(artifacts_dir() / "reader-export.png"), full_page=True)
    text = _visible_text(page)
    for raw in RAW:
        assert raw not in text, raw
    assert page.inner_text("#title") == TITLE
    assert page.inner_text(".md h2") == "Plan"
    assert page.inner_text(".md pre code .hljs-keyword") == "def"
    assert page.inner_text(".command .command-name") == "/model"
    assert page.inner_text(".stdout .ansi-bold") == "opusplan"
    lines = page.locator("details.tool > summary").all_inner_texts()
    assert lines[0].startswith("Edit /src/app/login.py ✓")
    assert page.locator(".todos li").count() == 3
    # No thread to link to in an export: the call names it.
    assert page.inner_text(".subagent-line") == f"sub-agent thread: {SUBAGENT}"
    assert "09:02" in page.get_attribute(".entry.assistant .role time", "title")
    assert errors == []


def test_the_way_back_from_a_sub_agent_finds_a_call_in_an_older_window(
    stack: GatewayStack, browser: Any
) -> None:
    session = reader_session(stack.pair.root)
    with session.path.open("ab") as transcript:
        for number in range(120):
            transcript.write(
                assistant(
                    f"later-{number}",
                    20,
                    [{"type": "text", "text": f"later {number}"}],
                    f"l{number}",
                )
            )
    stack.start_gateway()
    _wait_for_index(stack, WORD_IN_RESULT)
    page = _open(browser, f"{stack.url}/sessions/{SUBAGENT}")
    page.wait_for_selector("#where .parent-link")
    page.click("#where .parent-link")
    page.wait_for_selector(f"details.tool.linked[open][data-tool-use-id='{TASK_CALL}']")
    assert page.evaluate(
        f"""() => {{ const r = document.getElementById('call-{TASK_CALL}').getBoundingClientRect();
                   return r.top >= 0 && r.bottom <= innerHeight; }}"""
    )
