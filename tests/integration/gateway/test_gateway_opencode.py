"""opencode sessions through the gateway: listed with their source, photos served by their refs,
and read in the viewer (Chromium via Playwright) as a reader expects: one entry per message,
its text as markdown, reasoning folded, a tool call with its output and attachments on one
line, an edit as a diff, steps and snapshots not shown, every photo lazy."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import GatewayStack, artifacts_dir
from tests.support.opencode import DIRECTORY, Sample, write_sample


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    made = write_sample(tmp_path / "opencode.db")
    db = made.db
    answer = db.message(made.session, db.assistant_data(made.messages[-1]))
    edit = {
        "status": "completed",
        "input": {"filePath": "src/app.ts", "oldString": "margin: 3px", "newString": "margin: 0"},
        "output": "Edit applied",
        "title": "src/app.ts",
        "metadata": {},
        "time": {"start": 1, "end": 2},
    }
    db.part(
        made.session, answer, {"type": "tool", "callID": "call_edit", "tool": "edit", "state": edit}
    )
    db.part(made.session, answer, {"type": "text", "text": "## Done\n\nThe **margin** is gone."})
    return made


@pytest.fixture
def stack(tmp_path: Path, sample: Sample) -> Iterator[GatewayStack]:
    running = GatewayStack(tmp_path, opencode=sample.db.path)
    try:
        yield running
    finally:
        running.close()


# A photo's box: the image, or what stands for it once its thumbnail was refused.
PHOTO = "img.photo, .photo-refused"


def test_sessions_and_photos_through_the_gateway(stack: GatewayStack, sample: Sample) -> None:
    stack.start_gateway()
    listed = httpx.get(f"{stack.url}/api/v1/sessions").json()["sessions"]
    (top,) = [s for s in listed if s["sessionId"] == sample.session]
    assert (top["source"], top["projectDir"], top["title"]) == (
        "opencode",
        DIRECTORY,
        "Fix the login page",
    )
    window = httpx.get(f"{stack.url}/api/v1/sessions/{sample.session}/window").json()
    refs = [(e["uuid"], r) for e in window["entries"] for r in e.get("mediaRefs", [])]
    # The images over the default inline limit (32 KiB of base64): the pasted one and the
    # tool's second attachment; the first attachment stays inline in its entry.
    assert [(mid, ref.get("index", 0)) for mid, ref in refs] == [
        (sample.photo_message, 0),
        (sample.tool_message, 1),
    ]
    for _, ref in refs:
        index = ref.get("index", 0)
        assert ref["uri"] == f"{sample.session}/{ref['entryUuid']}/{index}"
        photo = httpx.get(stack.url + ref["url"])
        want = sample.db.part_images[ref["entryUuid"]][index]
        assert (photo.status_code, photo.content) == (200, want)
        assert photo.headers["etag"].strip('"') == hashlib.sha256(want).hexdigest()


@pytest.mark.browser
def test_a_reader_sees_an_opencode_session_in_the_viewer(
    stack: GatewayStack, sample: Sample, browser: Any
) -> None:
    stack.start_gateway()
    page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{stack.url}/sessions/{sample.session}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("details.tool[data-tool-use-id='call_edit']")
    text = str(page.inner_text("main"))
    assert page.locator(".entry.opencode.user .md", has_text="see the screenshot").count() == 1
    assert page.inner_text(".entry.opencode.assistant .md h2") == "Done"
    assert "## " not in text and "step-start" not in text and "4b825dc6" not in text
    assert "assistant (claude-sonnet-4)" in text
    reasoning = page.locator("details.thinking", has_text="reasoning")
    assert reasoning.count() == 1 and reasoning.evaluate("(d) => d.open") is False
    read = page.locator("details.tool[data-tool-use-id='call_1']")
    assert read.locator("summary").inner_text() == f"Read {DIRECTORY}/src/app.ts ✓"
    read.locator("summary").click()
    assert "export function login" in read.locator(".tool-result").inner_text()
    assert read.locator(f".tool-result :is({PHOTO})").count() == 2
    edit = page.locator("details.tool[data-tool-use-id='call_edit']")
    edit.locator("summary").click()
    assert edit.locator(".diff-del").count() >= 1 and edit.locator(".diff-add").count() >= 1
    # The test's PNGs sniff as PNG but do not decode: a photo scrolled to has its thumbnail
    # refused, and its box stands where the image was.
    assert page.locator(PHOTO).count() == 3
    for img in page.locator("img.photo").all():
        assert img.get_attribute("loading") == "lazy"
    page.screenshot(path=str(artifacts_dir() / "reader-opencode.png"), full_page=True)
    assert errors == []
