"""The viewer as a newcomer meets it (Debian's Chromium via Playwright), each page axe-core
clean in light and dark at 1280 and 390 px: a photo whose thumbnail the media service refuses
says what it is and links to it; a session whose first prompt holds an image is titled by its
text (Claude Code's and Codex's), one without text is "untitled session", never its id; a slim
fork is marked, links to its original, lists by its activity and keeps its original's mode;
every way to a search hit opens its block; a phone keeps three quarters of its screen for the
session, the queue box open only where a program follows the session; the images panel reads
in both themes and shows its last row; no raw markup in titles, snippets or Codex messages.
Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import io
import os
import stat
import time
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client import HistoryClient
from tests.support.browser import axe_everywhere, open_page
from tests.support.cli import cli
from tests.support.codex import Rollout, data_url, write_rollout
from tests.support.gateway import GatewayStack, artifacts_dir
from tests.support.reader import SESSION as READER_SESSION
from tests.support.reader import WORD_IN_RESULT, reader_session
from tests.support.servers import image_block, png

pytestmark = pytest.mark.browser

PROJECT = "-home-dev-app"
BROKEN = "broken-session"
CODEX_SESSION = "0199a0c3-4b5d-7e6f-8a9b-0c1d2e3f4a5b"
PROMPT = "Can you please make the header match this screenshot"


@cache
def huge_png() -> bytes:
    """A 9000x9000 PNG (over the media service's thumbnail budget of pixels) whose noisy
    corner makes its line run past the head a title is read from."""
    from PIL import Image

    image = Image.new("L", (9000, 9000), 200)
    image.paste(Image.effect_noise((800, 800), 120), (0, 0))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return out.getvalue()


def _line(fields: dict[str, Any]) -> bytes:
    return orjson.dumps(fields) + b"\n"


def broken_session(stack: GatewayStack) -> Path:
    """A Claude Code session whose first prompt is "[Image #1] <PROMPT>" with the huge PNG."""
    path = stack.pair.transcript(BROKEN, project=PROJECT)
    path.write_bytes(
        _line(
            {
                "type": "user",
                "uuid": "u-shot",
                "sessionId": BROKEN,
                "timestamp": "2026-03-04T09:00:00.000Z",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": f"[Image #1] {PROMPT}"},
                        image_block(huge_png()),
                    ],
                },
            }
        )
        + _line(
            {
                "type": "assistant",
                "uuid": "a-shot",
                "sessionId": BROKEN,
                "timestamp": "2026-03-04T09:01:00.000Z",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "I see a very large screenshot."}],
                },
            }
        )
    )
    return path


@pytest.fixture
def codex_stack(tmp_path: Path) -> Any:
    running = GatewayStack(tmp_path, codex=tmp_path / "codex" / "sessions")
    try:
        yield running
    finally:
        running.close()


def test_a_refused_thumbnail_says_what_the_image_is_and_links_to_it(
    stack: GatewayStack, browser: Any
) -> None:
    broken_session(stack)
    stack.start_gateway()
    url = f"{stack.url}/sessions/{BROKEN}"
    page = open_page(browser, url, ready=".photo-refused")
    box = page.locator(".photo-refused")
    size = f"{len(huge_png()) / 1e6:.1f} MB"
    assert (
        box.locator(".refused-what").inner_text()
        == f"PNG, 9000\u00d79000, {size}: too large to preview"
    )
    assert page.locator("img.photo").count() == 0  # no empty box left
    links = box.locator("a")
    assert links.all_inner_texts() == ["open the image", "download it"]
    # The links lead to the image itself, as the gateway serves it.
    original = httpx.get(stack.url + str(links.first.get_attribute("href")))
    assert original.status_code == 200 and original.content == huge_png()
    assert links.nth(1).get_attribute("download")
    page.screenshot(path=str(artifacts_dir() / "first-hour-refused.png"))
    # The images panel's thumbnail is refused too: its row says so.
    page.click(".images-toggle")
    page.wait_for_selector("table.images a")
    assert page.inner_text("table.images a") == "no preview: open"
    assert page.errors == []
    assert axe_everywhere(browser, url, ready=".photo-refused") == {}


def test_a_prompt_with_an_image_is_titled_by_its_text(
    codex_stack: GatewayStack, browser: Any, tmp_path: Path
) -> None:
    broken_session(codex_stack)
    rollout = Rollout(CODEX_SESSION)
    rollout.meta()
    rollout.turn_context()
    rollout.user("<image name=[Image #1]> why is this chart empty", [huge_png()])
    rollout.assistant("the axis has no data")
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    codex_stack.start_gateway()
    listed = httpx.get(f"{codex_stack.url}/api/v1/sessions").json()["sessions"]
    titles = {s["sessionId"]: s.get("title", "") for s in listed}
    assert titles[BROKEN] == PROMPT
    assert titles[CODEX_SESSION] == "why is this chart empty"

    page = open_page(browser, f"{codex_stack.url}/", ready="li.session")
    shown = page.locator(".session-title").all_inner_texts()
    assert sorted(shown) == sorted([PROMPT, "why is this chart empty"])
    page = open_page(browser, f"{codex_stack.url}/sessions/{BROKEN}", ready="#where .project")
    assert page.inner_text("#title") == PROMPT
    assert page.title() == f"{PROMPT} · Scrollback"


def test_a_session_without_a_prompt_is_untitled_never_its_id(
    stack: GatewayStack, browser: Any
) -> None:
    path = stack.pair.transcript("e3b0c442-98fc-4a1c-b2f3-1d2e3f4a5b6c", project=PROJECT)
    path.write_bytes(
        _line(
            {
                "type": "user",
                "uuid": "u-only-image",
                "timestamp": "2026-03-04T09:00:00.000Z",
                "message": {"role": "user", "content": [image_block(huge_png())]},
            }
        )
    )
    stack.start_gateway()
    page = open_page(browser, f"{stack.url}/", ready="li.session")
    assert page.inner_text(".session-title") == "untitled session"
    page.click("li.session a")
    page.wait_for_selector("#where .project")
    assert page.inner_text("#title") == "untitled session"
    assert "e3b0c442" not in page.inner_text("#bar")


def test_a_slim_fork_is_marked_lists_by_its_activity_and_keeps_the_original_mode(
    stack: GatewayStack, browser: Any
) -> None:
    original = broken_session(stack)
    original.chmod(0o640)
    activity = 1_772_614_860  # 2026-03-04 09:01 UTC, the session's last line
    os.utime(original, (activity, activity))
    later = stack.pair.transcript("later-session", project=PROJECT)
    later.write_bytes(
        _line(
            {
                "type": "user",
                "uuid": "u-later",
                "timestamp": "2026-03-04T10:00:00.000Z",
                "message": {"role": "user", "content": "a later conversation"},
            }
        )
    )
    os.utime(later, (activity + 3600, activity + 3600))
    stack.start_gateway()
    done = cli(
        stack.pair, "slim", BROKEN, "--fork", "--install", "--projects-dir", str(stack.pair.root)
    )
    assert done.returncode == 0, done.stderr
    (fork,) = [p for p in original.parent.glob("*.jsonl") if p not in (original, later)]
    # The copy is as private as its original, and as old.
    assert stat.S_IMODE(fork.stat().st_mode) == 0o640
    assert fork.stat().st_mtime_ns == original.stat().st_mtime_ns

    # The history service's tree walk is cached a moment: the fork lists once it is renewed.
    deadline = time.monotonic() + 10
    while True:
        listed = httpx.get(f"{stack.url}/api/v1/sessions").json()["sessions"]
        order = [s["sessionId"] for s in listed]
        if fork.stem in order or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert order[0] == "later-session", order
    copy = next(s for s in listed if s["sessionId"] == fork.stem)
    assert copy["slimCopyOf"] == BROKEN
    assert next(s for s in listed if s["sessionId"] == BROKEN)["slimCopyOf"] == ""

    page = open_page(browser, f"{stack.url}/", ready=".slim-of a")
    card = page.locator(f"li.session[data-session-id='{fork.stem}']")
    assert card.locator(".badge").inner_text() == "slim copy"
    card.locator(".slim-of a", has_text=PROMPT).wait_for()
    assert card.locator(".slim-of").inner_text() == f"slim copy of {PROMPT}"
    assert card.locator(".slim-of a").get_attribute("href") == f"/sessions/{BROKEN}"
    original_card = page.locator(f"li.session[data-session-id='{BROKEN}']")
    assert original_card.locator(".badge, .slim-of").count() == 0
    page.screenshot(path=str(artifacts_dir() / "first-hour-slim-list.png"))

    page = open_page(browser, f"{stack.url}/sessions/{fork.stem}", ready="#where .slim-of a")
    page.locator("#where .slim-of a", has_text=PROMPT).wait_for()
    page.click("#where .slim-of a")
    page.wait_for_url(f"**/sessions/{BROKEN}")
    assert axe_everywhere(browser, f"{stack.url}/", ready=".slim-of a") == {}

    # A slim copy written over its original keeps its id: it is no copy of another session.
    done = cli(stack.pair, "slim", BROKEN, "--install", "--projects-dir", str(stack.pair.root))
    assert done.returncode == 0, done.stderr
    assert b"cut by scrollback slim" in original.read_bytes()
    listed = httpx.get(f"{stack.url}/api/v1/sessions").json()["sessions"]
    assert next(s for s in listed if s["sessionId"] == BROKEN)["slimCopyOf"] == ""


def test_every_way_to_a_search_hit_opens_its_block_and_marks_it(
    stack: GatewayStack, browser: Any
) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway()
    deadline = time.monotonic() + 20
    while not httpx.get(f"{stack.url}/api/v1/search", params={"q": WORD_IN_RESULT}).json()["hits"]:
        assert time.monotonic() < deadline, "the indexer did not catch up"
        time.sleep(0.1)
    results = f"{stack.url}/?q={WORD_IN_RESULT}"
    for way in (".hit-group h2 a", ".hit-link"):
        page = open_page(browser, results, ready=way)
        hit = str(page.get_attribute(way, "href"))
        page.click(way)
        page.wait_for_selector("mark.found")
        assert page.inner_text("mark.found") == WORD_IN_RESULT
        # In the Bash call's result, the call opened, the mark on screen.
        assert page.evaluate(
            """() => { const mark = document.querySelector('mark.found');
                       const r = mark.getBoundingClientRect();
                       return mark.closest('details.tool').open && r.height > 0
                         && r.top >= 0 && r.bottom <= innerHeight; }"""
        ), way
        page.context.close()
    assert axe_everywhere(browser, results, ready=".hit-link") == {}
    assert axe_everywhere(browser, stack.url + hit, ready="mark.found") == {}


def _bar_and_box(page: Any) -> float:
    return float(
        page.evaluate(
            """() => [document.querySelector('#bar'),
                       document.querySelector('#send-bar') || document.querySelector('#send')]
                 .filter((n) => !n.hidden).reduce((h, n) => h + n.getBoundingClientRect().height, 0)"""
        )
    )


def test_a_phone_keeps_three_quarters_of_the_screen_for_the_session(
    stack: GatewayStack, browser: Any
) -> None:
    reader_session(stack.pair.root)
    stack.start_gateway()
    url = f"{stack.url}/sessions/{READER_SESSION}"
    phone = {"width": 390, "height": 844}
    page = open_page(browser, url, ready="#rescue .slim-download", viewport=phone)
    page.wait_for_selector("#insight .fact")
    # The header and the footer take under a quarter of the screen; the title is whole.
    assert _bar_and_box(page) < 844 / 4
    assert page.evaluate(
        """() => { const t = document.getElementById('title');
                   return t.scrollWidth <= t.clientWidth && t.scrollHeight <= t.clientHeight + 1; }"""
    )
    # No program follows the session: the queue box is one line, opened on demand.
    assert not page.is_visible("#send-text") and page.is_visible("#send-open")
    page.screenshot(path=str(artifacts_dir() / "first-hour-phone.png"))
    page.click("#send-open")
    assert page.evaluate("() => document.activeElement.id") == "send-text"
    assert page.get_attribute("#send-open", "aria-expanded") == "true"

    # A bridge binds a chat key to the session: the box is open from the start, still small.
    with HistoryClient(stack.pair.history_addr) as history:
        history.bind_chat_key("chat-bridge-1", READER_SESSION)
    page = open_page(browser, url, ready="#rescue .slim-download", viewport=phone)
    page.wait_for_selector("#send-text", state="visible")
    assert not page.is_visible("#send-open")
    assert _bar_and_box(page) < 844 / 4
    assert axe_everywhere(browser, url, ready="#rescue .slim-download") == {}


def test_no_raw_markup_in_titles_snippets_or_codex_messages(
    codex_stack: GatewayStack, browser: Any, tmp_path: Path
) -> None:
    stack = codex_stack
    tagged = stack.pair.transcript("tagged-session", project=PROJECT)
    tagged.write_bytes(
        _line(
            {
                "type": "user",
                "uuid": "u-tagged",
                "timestamp": "2026-03-04T09:00:00.000Z",
                "message": {
                    "role": "user",
                    "content": "<ide_opened_file>The user opened the file /src/app.py in the IDE."
                    "</ide_opened_file>Please make the **flamingo** button `bigger`",
                },
            }
        )
    )
    broken_session(stack)
    rollout = Rollout(CODEX_SESSION)
    rollout.meta()
    rollout.add(
        "response_item",
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "<image name=[Image #1]>"},
                {"type": "input_image", "image_url": data_url(png(3))},
                {"type": "input_text", "text": "</image>"},
                {"type": "input_text", "text": "why is the pelican chart empty"},
            ],
        },
        [png(3)],
    )
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    stack.start_gateway()
    done = cli(
        stack.pair, "slim", BROKEN, "--fork", "--install", "--projects-dir", str(stack.pair.root)
    )
    assert done.returncode == 0, done.stderr
    fork = done.stdout.split("claude --resume ")[-1].split()[0]
    deadline = time.monotonic() + 20
    for word in ("flamingo", "scrollback"):
        while not httpx.get(f"{stack.url}/api/v1/search", params={"q": word}).json()["hits"]:
            assert time.monotonic() < deadline, "the indexer did not catch up"
            time.sleep(0.1)

    page = open_page(browser, f"{stack.url}/", ready="li.session")
    titles = page.locator(".session-title").all_inner_texts()
    assert "Please make the flamingo button bigger" in titles, titles
    # The search results: tags, markdown marks and a slim note's refs and digests left out.
    for word, shown in (("flamingo", "Please make the flamingo button bigger"), ("scrollback", "")):
        page = open_page(browser, f"{stack.url}/?q={word}", ready=".hit-link")
        snippets = page.locator(".snippet").all_inner_texts()
        for text in snippets:
            for raw in ("<", "**", "`", " pin ", "sha256"):
                assert raw not in text, (raw, text)
        assert page.locator(".snippet mark").first.inner_text().lower() == word
        if shown:
            assert any(shown in text for text in snippets), snippets
    # The slim copy's note reads as a note in the session too.
    page = open_page(browser, f"{stack.url}/sessions/{fork}", ready=".note-slim")
    note = page.inner_text(".note-slim")
    assert note.startswith("image cut by scrollback slim: image/png") and "sha256" not in note
    assert axe_everywhere(browser, f"{stack.url}/sessions/{fork}", ready=".note-slim") == {}
    assert axe_everywhere(browser, f"{stack.url}/?q=flamingo", ready=".hit-link") == {}
    # Codex's image wrappers are not shown.
    page = open_page(browser, f"{stack.url}/sessions/{CODEX_SESSION}", ready="img.photo")
    text = page.inner_text("main")
    assert (
        "why is the pelican chart empty" in text and "<image" not in text and "</image>" not in text
    )


def test_the_images_panel_reads_in_both_themes_and_shows_its_last_row(
    stack: GatewayStack, browser: Any
) -> None:
    path = stack.pair.transcript("many-images", project=PROJECT)
    path.write_bytes(
        b"".join(
            _line(
                {
                    "type": "user",
                    "uuid": f"u-shot-{number}",
                    "timestamp": "2026-03-04T09:00:00.000Z",
                    "message": {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": f"shot {number}"},
                            # Every third over the API's 2000 px: a problem row.
                            image_block(png(number, 60 if number % 3 else 2100)),
                        ],
                    },
                }
            )
            for number in range(14)
        )
    )
    stack.start_gateway()
    url = f"{stack.url}/sessions/many-images"
    page = open_page(browser, url, ready=".images-toggle")
    page.click(".images-toggle")
    page.wait_for_selector("table.images tr.problem")
    # Scrolled to its end, the panel shows its last row whole, on the screen.
    edges = page.evaluate(
        """() => { const panel = document.querySelector('.images-panel')
                     || document.querySelector('table.images');
                   panel.scrollTop = panel.scrollHeight;
                   const rows = panel.querySelectorAll('tr');
                   const last = rows[rows.length - 1].getBoundingClientRect();
                   const box = panel.getBoundingClientRect();
                   const footer = (document.getElementById('send-bar')
                     || document.getElementById('send')).getBoundingClientRect();
                   return [last.bottom, box.bottom, innerHeight, footer.top]; }"""
    )
    last, panel, screen, footer = edges
    assert last <= panel and panel <= footer and footer <= screen, edges
    page.screenshot(path=str(artifacts_dir() / "first-hour-images-panel.png"))
    found = axe_everywhere(
        browser,
        url,
        ready=".images-toggle",
        then="() => document.querySelector('.images-toggle').click()",
    )
    assert found == {}
    assert page.get_attribute(".images-toggle", "aria-expanded") == "true"


def test_a_thumbnail_that_failed_in_passing_is_asked_again(
    stack: GatewayStack, browser: Any
) -> None:
    path = stack.pair.transcript("one-photo", project=PROJECT)
    path.write_bytes(
        _line(
            {
                "type": "user",
                "uuid": "u-photo",
                "timestamp": "2026-03-04T09:00:00.000Z",
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": "a photo"}, image_block(png(5, 200))],
                },
            }
        )
    )
    stack.start_gateway()
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    busy: list[str] = []

    def first_two_busy(route: Any) -> None:
        # The gateway's answer when too many downloads are open, for the first two asks.
        if len(busy) < 2:
            busy.append(route.request.url)
            route.fulfill(
                status=429,
                content_type="application/json",
                body=orjson.dumps({"error": {"code": "TOO_MANY_DOWNLOADS", "message": "busy"}}),
            )
        else:
            route.continue_()

    page.route("**/api/v1/media/**", first_two_busy)
    page.goto(f"{stack.url}/sessions/one-photo")
    page.wait_for_function(
        "() => { const i = document.querySelector('img.photo');"
        " return i && i.complete && i.naturalWidth > 0; }",
        timeout=15000,
    )
    assert page.locator(".photo-refused").count() == 0
    assert len(busy) == 2
    context.close()
