"""Gemini CLI sessions through the gateway: listed with their source, photos served by their
message id refs, and read in the viewer (Chromium via Playwright) as a reader expects: each live
message once, the model's thoughts folded, a tool call with its result and photos, lazily."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import GatewayStack, artifacts_dir
from tests.support.gemini import PROJECT_ROOT, full_session, images_of, write_session

SESSION = "7d3f6a52-1c2b-4e8f-9a0d-3b5c7e9f1a24"


@pytest.fixture
def gemini_stack(tmp_path: Path) -> Iterator[GatewayStack]:
    running = GatewayStack(tmp_path, gemini=tmp_path / "gemini")
    try:
        yield running
    finally:
        running.close()


# A photo's box: the image, or what stands for it once its thumbnail was refused.
PHOTO = "img.photo, .photo-refused"


def test_gemini_sessions_and_photos_through_the_gateway(
    gemini_stack: GatewayStack, tmp_path: Path
) -> None:
    session = full_session(SESSION)
    write_session(tmp_path / "gemini", session)
    gemini_stack.start_gateway()
    listed = httpx.get(f"{gemini_stack.url}/api/v1/sessions").json()["sessions"]
    (only,) = [s for s in listed if s["sessionId"] == SESSION]
    assert (only["source"], only["projectDir"]) == ("gemini", PROJECT_ROOT)
    window = httpx.get(f"{gemini_stack.url}/api/v1/sessions/{SESSION}/window").json()
    assert [e["uuid"] for e in window["entries"]] == list(session.messages)
    refs = [(e["uuid"], r) for e in window["entries"] for r in e["mediaRefs"]]
    assert len(refs) == 3
    for message_id, ref in refs:
        assert ref["uri"] == f"{SESSION}/{message_id}/{ref.get('index', 0)}"
        photo = httpx.get(gemini_stack.url + ref["url"])
        want = images_of(session.messages[message_id])[ref.get("index", 0)]
        assert (photo.status_code, photo.content) == (200, want)
        assert photo.headers["etag"].strip('"') == hashlib.sha256(want).hexdigest()


@pytest.mark.browser
def test_a_reader_sees_a_gemini_session_in_the_viewer(
    gemini_stack: GatewayStack, tmp_path: Path, browser: Any
) -> None:
    write_session(tmp_path / "gemini", full_session(SESSION))
    gemini_stack.start_gateway()
    page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{gemini_stack.url}/sessions/{SESSION}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("details.tool[data-tool-use-id='call-1']")
    text = str(page.inner_text("main"))
    # Each live message once, its latest version; the rewound turn nowhere.
    assert page.locator(".entry.gemini.user").count() == 3
    assert page.locator(".entry.gemini.assistant").count() == 2
    assert text.count("It is a photo of a cat.") == 1
    assert "start over" not in text and "Sure." not in text
    assert "assistant (gemini-2.5-pro)" in text
    # Thoughts folded; the tool call on one line, its result's photos inside it.
    thinking = page.locator("details.thinking", has_text="thinking")
    assert thinking.count() == 1 and thinking.evaluate("(d) => d.open") is False
    call = page.locator("details.tool[data-tool-use-id='call-1']")
    assert call.locator("summary .tool-name").inner_text() == "read_many_files"
    call.locator("summary").click()
    assert "read 1 file" in call.locator(".tool-result").inner_text()
    assert call.locator(f".tool-result :is({PHOTO})").count() == 2
    assert page.locator(f".entry.gemini.user > .body :is({PHOTO})").count() == 1
    for img in page.locator("img.photo").all():
        assert img.get_attribute("loading") == "lazy"
    # The test's PNGs sniff as PNG but do not decode: each photo scrolled to has its thumbnail
    # refused, and its box links to the image, which the gateway serves.
    for box in page.locator(PHOTO).all():
        box.scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('.photo-refused').length === 3")
    for box in page.locator(".photo-refused").all():
        href = str(box.locator("a").first.get_attribute("href"))
        answer = httpx.get(gemini_stack.url + href)
        assert (answer.status_code, answer.headers["content-type"]) == (200, "image/png")
    page.screenshot(path=str(artifacts_dir() / "reader-gemini.png"), full_page=True)
    assert errors == []
