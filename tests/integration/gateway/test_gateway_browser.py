"""The viewer in Debian's Chromium (Playwright): lazy photos, each once, cached on reload, live;
320 px thumbnails in the boxes, the full image on click, the session's insight in the bar.

A session of 400 entries with 60 photos opens at its latest window with only
the photos in the first viewport fetched (counted at the gateway and in the
browser); scrolling to the top loads every older window and each photo exactly
once, keeping the reader's place; a reload fetches no photo again; an appended
line shows up without a reload. Screenshots go to test-artifacts/.

Chromium cannot be downloaded here: scripts/test installs the `chromium`
Debian package. Without it the test skips, except under CI=true where it fails.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.gateway import SESSION, GatewayStack, artifacts_dir, photo_session
from tests.support.servers import user_line

# These tests drive Chromium: `./scripts/test --quick` leaves them to CI.
pytestmark = pytest.mark.browser


def photo_png(width: int, height: int) -> bytes:
    """A real PNG of these dimensions (Pillow), noisy enough to be cut out of its line."""
    from PIL import Image

    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    image.paste(Image.effect_noise((200, 200), 90).convert("RGB"), (0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def usage_line(uuid: str, message_id: str, model: str, tokens_in: int, tokens_out: int) -> bytes:
    """An assistant line with a message id, a model and its usage."""
    return (
        orjson.dumps(
            {
                "type": "assistant",
                "uuid": uuid,
                "timestamp": "2026-01-01T10:00:00Z",
                "message": {
                    "id": message_id,
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": f"answer {uuid}"}],
                    "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
                },
            }
        )
        + b"\n"
    )


def _media_path(url: str) -> str:
    return url.split("://", 1)[-1].partition("/")[2].partition("?")[0]


def _settle(page: Any) -> None:
    # Not "networkidle": the live event stream stays open. Let observers fire, then
    # wait for every photo asked for to arrive.
    page.wait_for_timeout(250)
    page.wait_for_function(
        "() => [...document.querySelectorAll('img.photo[src]')].every((img) => img.complete)"
    )


def _visible_photos(page: Any) -> list[str]:
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll('img.photo')].filter((img) => {
                 const r = img.getBoundingClientRect();
                 return r.bottom > 0 && r.top < window.innerHeight && r.height > 0;
               }).map((img) => new URL(img.dataset.src, location.href).pathname.slice(1))"""
        )
    )


def test_viewer_is_lazy_fetches_each_photo_once_and_follows_live(
    stack: GatewayStack, browser: Any
) -> None:
    photo_uuids = photo_session(stack, entries=400, photos=60)
    stack.start_gateway()
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    browser_hits: list[str] = []
    page.on(
        "request",
        lambda request: (
            browser_hits.append(_media_path(request.url))
            if "/api/v1/media/" in request.url
            else None
        ),
    )

    photo_queries: list[str] = []
    page.on(
        "request",
        lambda request: (
            photo_queries.append(request.url.partition("?")[2])
            if "/api/v1/media/" in request.url
            else None
        ),
    )

    page.goto(f"{stack.url}/sessions/{SESSION}")
    page.wait_for_selector("body[data-ready='1']")
    _settle(page)
    shots = artifacts_dir()
    page.screenshot(path=str(shots / "viewer-open.png"))
    # The boxes show 320 px thumbnails.
    assert photo_queries and all(q.endswith("&size=320") for q in photo_queries)

    # Only the photos in the first viewport were fetched: at the gateway and in the browser.
    visible = sorted(_visible_photos(page))
    at_gateway = sorted(hit.path[1:] for hit in stack.log.media())
    assert 0 < len(visible) < 10
    assert at_gateway == visible
    assert sorted(browser_hits) == visible
    assert all(hit.status == 200 for hit in stack.log.media())

    # Loading an older window keeps the entry under the reader's eyes where it was.
    # (Stepwise, as a reader scrolls: a jump would skip photo boxes.)
    while page.evaluate("() => document.scrollingElement.scrollTop") >= 900:
        page.evaluate("() => window.scrollBy(0, -300)")
        page.wait_for_timeout(60)
    _settle(page)
    anchor = page.evaluate(
        """() => { const e = document.elementFromPoint(500, 400).closest('.entry');
                   return [e.dataset.offset, e.getBoundingClientRect().top,
                           document.querySelectorAll('.entry').length]; }"""
    )
    page.evaluate("() => window.scrollBy(0, -300)")
    page.wait_for_function(f"() => document.querySelectorAll('.entry').length > {anchor[2]}")
    _settle(page)
    top_after = page.evaluate(
        f"""() => document.querySelector('.entry[data-offset="{anchor[0]}"]')
                    .getBoundingClientRect().top"""
    )
    assert abs(top_after - (anchor[1] + 300)) <= 2

    # Scroll to the very top in steps shorter than the viewport: every box passes through it.
    for _ in range(400):
        done = page.evaluate(
            """() => { window.scrollBy(0, -400);
                       return document.scrollingElement.scrollTop === 0
                         && document.querySelector('.more').textContent === 'start of session'; }"""
        )
        page.wait_for_timeout(60)
        if done:
            break
    _settle(page)
    page.screenshot(path=str(shots / "viewer-top.png"))
    assert page.locator(".entry").count() == 400
    expected = Counter(f"{SESSION}/{uuid}/0" for uuid in photo_uuids)
    assert Counter(hit.path.removeprefix("/api/v1/media/") for hit in stack.log.media()) == expected
    assert Counter(hit.removeprefix("api/v1/media/") for hit in browser_hits) == expected

    # A reload fetches no photo's bytes again (browser cache, or a 304 at most).
    stack.log.clear()
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    _settle(page)
    assert [hit for hit in stack.log.media() if hit.status != 304] == []
    assert page.evaluate(
        "() => [...document.querySelectorAll('img.photo[src]')]"
        ".every((img) => img.complete && img.naturalWidth === 110)"
    )

    # An appended line shows up without a reload.
    with stack.pair.transcript(SESSION).open("ab") as transcript:
        transcript.write(user_line("live0001", "a line appended while the page was open"))
    page.get_by_text("a line appended while the page was open").wait_for(timeout=15000)
    time.sleep(0.2)
    page.screenshot(path=str(shots / "viewer-live.png"))
    context.close()


def test_viewer_searches_and_opens_a_hit(stack: GatewayStack, browser: Any) -> None:
    photo_session(stack, entries=200, photos=20)
    stack.start_gateway()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        found = httpx.get(f"{stack.url}/api/v1/search", params={"q": '"question 152"'}).json()
        if found["hits"]:
            break
        time.sleep(0.1)
    assert found["hits"], "the indexer caught up"
    page = browser.new_context(viewport={"width": 1000, "height": 800}).new_page()
    page.goto(f"{stack.url}/")
    page.wait_for_selector(".sessions a")
    page.fill("#search-q", '"question 152"')
    page.press("#search-q", "Enter")
    page.wait_for_selector(".hits a.hit-link")
    assert page.eval_on_selector_all(".hits mark", "(ms) => ms.map((m) => m.textContent)") == [
        "question",
        "152",
    ]
    page.click(".hits a.hit-link")
    page.wait_for_selector(".entry.hit")
    assert page.eval_on_selector(".entry.hit .text", "(n) => n.textContent") == "question 152"
    in_view = page.eval_on_selector(
        ".entry.hit",
        "(n) => { const r = n.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }",
    )
    assert in_view
    page.screenshot(path=str(artifacts_dir() / "viewer-search-hit.png"))


def test_viewer_shows_thumbnails_the_full_image_on_click_and_the_insight(
    stack: GatewayStack, browser: Any
) -> None:
    big = photo_png(1200, 800)
    lines = [user_line("u0000", "a big screenshot", images=(big,))]
    for number in range(1, 9):
        lines.append(user_line(f"u{number:04d}", f"question {number}"))
        lines.append(
            usage_line(f"a{number:04d}", f"msg_{number}", "claude-sonnet-4-5", 1000, 250 * number)
        )
    stack.pair.transcript(SESSION).write_bytes(b"".join(lines))
    stack.start_gateway()
    page = browser.new_context(viewport={"width": 1000, "height": 800}).new_page()
    requests: list[str] = []
    page.on(
        "request",
        lambda request: requests.append(request.url) if "/api/v1/media/" in request.url else None,
    )
    page.goto(f"{stack.url}/sessions/{SESSION}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("#insight .fact")
    page.evaluate("() => { document.scrollingElement.scrollTop = 0; }")
    _settle(page)

    # The insight header: entries, photos, tokens and cost, as GetSession counts them.
    facts = dict(
        page.eval_on_selector_all(
            "#insight .fact", "(fs) => fs.map((f) => [f.dataset.fact, f.textContent])"
        )
    )
    tokens = 8 * 1000 + 250 * sum(range(1, 9))
    assert facts["entries"] == "17 entries" and facts["photos"] == "1 photo"
    assert facts["tokens"] == f"{tokens:,} tokens"
    assert facts["cost"].startswith("$") and facts["cost"].endswith(" cost")
    assert "claude-sonnet-4-5" in page.inner_text("#insight")

    # The box holds the 320 px thumbnail; the original was not fetched.
    (thumb_url,) = requests
    assert thumb_url.endswith("&size=320")
    assert page.eval_on_selector("img.photo", "(img) => [img.naturalWidth, img.naturalHeight]") == [
        320,
        213,
    ]
    page.screenshot(path=str(artifacts_dir() / "viewer-thumbnails.png"))

    # A click opens the full image (fetched now, once), Escape closes it.
    page.click("img.photo")
    page.wait_for_function(
        "() => { const img = document.querySelector('#lightbox img.full');"
        " return img && img.complete && img.naturalWidth > 0; }"
    )
    assert page.eval_on_selector("#lightbox img.full", "(img) => img.naturalWidth") == 1200
    assert len(requests) == 2 and requests[1] == thumb_url.removesuffix("&size=320")
    assert [hit.status for hit in stack.log.media()] == [200, 200]
    page.screenshot(path=str(artifacts_dir() / "viewer-full-image.png"))
    page.keyboard.press("Escape")
    assert page.locator("#lightbox").count() == 0


def test_viewer_offers_the_images_panel_and_a_slim_download(
    stack: GatewayStack, browser: Any
) -> None:
    from tests.support.rescue import SESSION as BROKEN
    from tests.support.rescue import broken_session

    session = broken_session(stack.pair.root)
    stack.start_gateway()
    page = browser.new_context(
        viewport={"width": 1200, "height": 900}, accept_downloads=True
    ).new_page()
    page.goto(f"{stack.url}/sessions/{BROKEN}")
    page.wait_for_selector("body[data-ready='1']")
    toggle = page.wait_for_selector("#rescue .images-toggle")
    assert toggle.text_content() == "images (4, 0 too large)"
    toggle.click()
    rows = page.eval_on_selector_all(
        "table.images tr", "(rows) => rows.map((r) => r.cells[0].textContent)"
    )
    assert rows[1:] == [
        "messages.0.content.1",
        "messages.2.content.0.content.0",
        "messages.2.content.2",
        "messages.2.content.3",
        "messages.0.content.2",
    ]
    page.screenshot(path=str(artifacts_dir() / "viewer-rescue.png"))
    with page.expect_download() as waiting:
        page.click("#rescue .slim-download")
    download = waiting.value
    assert download.suggested_filename == f"{BROKEN}.slim.jsonl"
    copy = Path(download.path()).read_bytes()
    assert copy.count(b"\n") == session.complete_lines and b'"data":"' not in copy
