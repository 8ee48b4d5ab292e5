"""Codex rollouts through the gateway: listed with their source, photos served by offset refs,
and read in the viewer (Chromium via Playwright) and the HTML export as a reader expects:
messages as markdown, reasoning summaries folded with no encrypted blob, a call with its output
on one line, apply_patch as a diff, photos lazy, the user message once, compaction marked."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cli import cli
from tests.support.codex import CWD, SECRET_WORD, Rollout, full_rollout, write_rollout
from tests.support.gateway import REPO, GatewayStack, artifacts_dir


@pytest.fixture
def codex_stack(tmp_path: Path) -> Iterator[GatewayStack]:
    running = GatewayStack(tmp_path, codex=tmp_path / "codex" / "sessions")
    try:
        yield running
    finally:
        running.close()


def test_rollout_sessions_and_photos_through_the_gateway(
    codex_stack: GatewayStack, tmp_path: Path
) -> None:
    session = str(uuid.uuid4())
    rollout = full_rollout(session)
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    codex_stack.start_gateway()
    listed = httpx.get(f"{codex_stack.url}/api/v1/sessions").json()["sessions"]
    (only,) = [s for s in listed if s["sessionId"] == session]
    assert (only["source"], only["projectDir"]) == ("codex", CWD)
    window = httpx.get(f"{codex_stack.url}/api/v1/sessions/{session}/window").json()
    refs = [(int(e["byteOffset"]), r) for e in window["entries"] for r in e["mediaRefs"]]
    expected = {
        offset: images
        for offset, images in zip(
            [sum(len(line) + 1 for line in rollout.lines[:k]) for k in range(len(rollout.lines))],
            rollout.images,
            strict=True,
        )
        if images
    }
    assert len(refs) == 6
    for offset, ref in refs:
        assert ref["uri"] == f"{session}/at-{offset}/{ref['index']}"
        photo = httpx.get(codex_stack.url + ref["url"])
        assert photo.status_code == 200
        assert photo.headers["content-type"] == "image/png"
        want = expected[offset][ref["index"]]
        assert photo.content == want
        assert photo.headers["etag"].strip('"') == hashlib.sha256(want).hexdigest()


PATCH = (
    "*** Begin Patch\n"
    "*** Update File: src/layout.css\n"
    "@@ .albatross {\n"
    "-  margin-left: 3px;\n"
    "+  margin-left: 0;\n"
    "   display: flex;\n"
    "*** Add File: src/heron.txt\n"
    "+a new heron\n"
    "*** End Patch"
)


def _reader_rollout(session: str) -> Rollout:
    """The full rollout with a markdown answer and an apply_patch call after it."""
    rollout = full_rollout(session)
    rollout.assistant("## Fix\n\nMove the **albatross** button:\n\n- drop the margin\n")
    rollout.apply_patch(
        "call_patch", PATCH, "Success. Updated the following files:\nM src/layout.css\n"
    )
    return rollout


# A photo's box: the image, or (in the viewer) what stands for it once its thumbnail was refused.
PHOTO = "img.photo, .photo-refused"


def _check_reading(page: Any) -> None:
    """What a reader must see of _reader_rollout, in the viewer and in the export alike."""
    text = str(page.inner_text("main"))
    # Messages as markdown; the user's message once (not its event_msg copy).
    assert page.locator(".entry.user .md", has_text="fix the flamingo layout").count() == 1
    assert (
        page.locator(".entry.user .md", has_text="please look at the flamingo screenshot").count()
        == 1
    )
    assert text.count("please look at the flamingo screenshot") == 1
    assert page.inner_text(".entry.assistant .md h2") == "Fix"
    assert page.inner_text(".entry.assistant .md strong") == "albatross"
    assert "## " not in text and "**" not in text
    assert (
        page.locator(".entry.assistant .md", has_text="The albatross button is misaligned.").count()
        == 1
    )
    # Reasoning: the summary there but folded; the encrypted blob nowhere in the page.
    reasoning = page.locator("details.thinking", has_text="reasoning")
    assert reasoning.count() == 1
    assert reasoning.evaluate("(d) => d.open") is False
    assert reasoning.locator(".md").text_content() == "Considering the pelican layout"
    assert not reasoning.locator(".md").is_visible()
    assert SECRET_WORD not in page.content()
    # The shell call and its output as one line; the output's screenshot inside it.
    shell = page.locator("details.tool[data-tool-use-id='call_1']")
    assert shell.locator("summary").inner_text() == "shell view_image shot.png ✓"
    shell.locator("summary").click()
    assert shell.locator("pre code").inner_text() == "view_image shot.png"
    assert shell.locator(".tool-result pre.output").inner_text() == "captured the heron window"
    assert shell.locator(f".tool-result :is({PHOTO})").count() == 1
    assert page.locator(".entries > .entry:not(.folded) > .body > .tool-result").count() == 0
    # apply_patch as a diff per file, its output folded into it.
    patch = page.locator("details.tool[data-tool-use-id='call_patch']")
    assert patch.locator("summary").inner_text() == "apply_patch src/layout.css, src/heron.txt ✓"
    patch.locator("summary").click()
    assert patch.locator(".diff-path").all_inner_texts() == [
        "src/layout.css",
        "src/heron.txt (added)",
    ]
    assert patch.locator(".diff-del").all_inner_texts() == ["-   margin-left: 3px;"]
    assert patch.locator(".diff-add").all_inner_texts() == ["+   margin-left: 0;", "+ a new heron"]
    assert "Updated the following files" in patch.locator(".tool-result").inner_text()
    # Photos: the user's two pasted ones and the compaction's, lazy; none of the copies'.
    user_photos = page.locator(f".entry.user:not(.tool-output) > .body :is({PHOTO})")
    assert user_photos.count() == 2
    assert page.locator(PHOTO).count() == 4
    for img in page.locator("img.photo").all():
        assert img.get_attribute("loading") == "lazy"
    # Compaction marked as Claude Code's; token counts and event copies not shown.
    assert page.locator(".entry.compaction .note-compaction summary").inner_text() == (
        "Summary of the conversation before compaction"
    )
    assert "token_count" not in text and "user_message" not in text
    assert (
        page.locator(".entry.session-meta").inner_text().endswith(f"Codex 0.30.0 in {CWD} on main")
    )
    assert "You are Codex." not in text


@pytest.mark.browser
def test_a_reader_sees_a_rollout_in_the_viewer(
    codex_stack: GatewayStack, tmp_path: Path, browser: Any
) -> None:
    session = str(uuid.uuid4())
    write_rollout(tmp_path / "codex" / "sessions", _reader_rollout(session))
    codex_stack.start_gateway()
    # bypass_csp only so that the test can add axe-core's script (the CSP is checked by
    # test_no_rollout_markup_runs and test_gateway_http).
    page = browser.new_context(viewport={"width": 1100, "height": 900}, bypass_csp=True).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{codex_stack.url}/sessions/{session}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("details.tool[data-tool-use-id='call_patch']")
    _check_reading(page)
    # Each photo is asked of the gateway once scrolled to. The test's PNGs are bytes that sniff
    # as PNG but do not decode: each thumbnail is refused, and its box says so and links to
    # the image, which the gateway serves. (A photo in a folded call or summary is asked for
    # once that is opened.)
    assert page.locator(".entry.compaction img.photo").get_attribute("src") is None
    page.locator(".entry.compaction details summary").click()
    for _ in range(8):
        waiting = page.locator("img.photo")
        if not waiting.count():
            break
        waiting.first.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    page.wait_for_function("() => document.querySelectorAll('.photo-refused').length === 4")
    for box in page.locator(".photo-refused").all():
        assert box.get_attribute("data-reason") == "NOT_AN_IMAGE"
        assert "not an image this server can preview" in box.inner_text()
        href = str(box.locator("a").first.get_attribute("href"))
        assert href.startswith("/api/v1/media/"), href
        answer = httpx.get(codex_stack.url + href)
        assert (answer.status_code, answer.headers["content-type"]) == (200, "image/png")
    page.screenshot(path=str(artifacts_dir() / "reader-codex.png"), full_page=True)
    assert errors == []
    axe = REPO / ".tools" / "node_modules" / "axe-core" / "axe.min.js"
    if not axe.exists():
        pytest.skip("axe-core is not installed (scripts/test installs it into .tools)")
    page.add_script_tag(path=str(axe))
    violations = page.evaluate(
        "async () => (await axe.run(document, { resultTypes: ['violations'] })).violations"
        ".filter((v) => v.impact === 'serious' || v.impact === 'critical')"
        ".map((v) => v.id + ': ' + v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', '))"
    )
    assert violations == []


@pytest.mark.browser
def test_the_html_export_of_a_rollout_reads_as_the_viewer_does(
    codex_stack: GatewayStack, tmp_path: Path, browser: Any
) -> None:
    session = str(uuid.uuid4())
    write_rollout(tmp_path / "codex" / "sessions", _reader_rollout(session))
    target = tmp_path / "export"
    done = cli(codex_stack.pair, "export", session, "--html", str(target))
    assert done.returncode == 0, done.stderr
    page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto((target / "index.html").as_uri())
    page.wait_for_selector("body[data-ready='1']")
    _check_reading(page)
    # The photos are the exported files beside the page.
    for img in page.locator("img.photo").all():
        assert str(img.get_attribute("src")).startswith("media/")
    page.screenshot(path=str(artifacts_dir() / "reader-codex-export.png"), full_page=True)
    assert errors == []


@pytest.mark.browser
def test_no_rollout_markup_runs(codex_stack: GatewayStack, tmp_path: Path, browser: Any) -> None:
    """A rollout's messages, call names, arguments, patches and outputs are text, never markup,
    with the page's CSP in force."""
    attack = (
        "<img src=x onerror=\"document.body.dataset.pwned='1'\"> "
        "[click](javascript:document.body.dataset.pwned='2') "
        "<script>document.body.dataset.pwned='3'</script>"
    )
    session = str(uuid.uuid4())
    rollout = Rollout(session)
    rollout.meta(cwd=CWD)
    rollout.assistant(attack)
    rollout.add(
        "response_item",
        {"type": "function_call", "name": attack, "arguments": attack, "call_id": "c<b>1"},
    )
    rollout.add(
        "response_item", {"type": "function_call_output", "call_id": "c<b>1", "output": attack}
    )
    rollout.apply_patch(
        "c2", f"*** Begin Patch\n*** Add File: {attack}\n+{attack}\n*** End Patch", attack
    )
    rollout.add(
        "response_item",
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": attack}]},
    )
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    codex_stack.start_gateway()
    page = browser.new_context().new_page()
    page.goto(f"{codex_stack.url}/sessions/{session}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("details.tool[data-tool-use-id='c2'] .tool-result", state="attached")
    for summary in page.locator("main details > summary").all():
        summary.click()
    assert page.evaluate("() => document.body.dataset.pwned") is None
    assert page.locator("main img, main script").count() == 0
    assert page.locator("main a[href^='javascript']").count() == 0
    assert "<img src=x onerror=" in page.inner_text(".entry.assistant .md")
    call = page.locator("details.tool[data-tool-use-id='c<b>1']")
    assert call.locator(".tool-name").inner_text() == attack
    assert "<script>" in call.locator(".tool-result").inner_text()
    assert "<script>" in page.inner_text("details.tool[data-tool-use-id='c2'] .diff-add")
