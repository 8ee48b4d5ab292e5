"""The gateway's rescue routes over real servers: the image list and the slim download."""

from __future__ import annotations

import hashlib
import json

import httpx

from scrollback.contract.stripping import MIN_INLINE_LIMIT, find_payload_spans
from tests.support.gateway import TOKENS, GatewayStack
from tests.support.rescue import SESSION, broken_session


def test_images_and_slim_download(stack: GatewayStack) -> None:
    session = broken_session(stack.pair.root)
    before = hashlib.sha256(session.path.read_bytes()).hexdigest()
    stack.start_gateway()
    listing = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/images").json()
    assert listing["totals"] == {
        "images": 4,
        "documents": 1,
        "withProblems": 0,
        "sizeBytes": str(
            sum(
                len(b)
                for b in (
                    session.screenshot,
                    session.read_image,
                    session.pdf,
                    session.tiny,
                    session.agent_image,
                )
            )
        ),
    }
    first = listing["images"][0]
    assert (first["apiPath"], first["width"], first["height"]) == (
        "messages.0.content.1",
        2400,
        1600,
    )
    photo = httpx.get(stack.url + first["url"])
    assert photo.status_code == 200 and photo.content == session.screenshot
    assert listing["images"][2]["url"] is None  # a document: no ref

    answer = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/slim")
    assert answer.status_code == 200
    assert answer.headers["content-disposition"] == f'attachment; filename="{SESSION}.slim.jsonl"'
    assert answer.headers["x-content-type-options"] == "nosniff"
    lines = answer.content.split(b"\n")
    assert len(lines) - 1 == session.complete_lines
    for raw in lines:
        assert find_payload_spans(raw, MIN_INLINE_LIMIT) == []
        if raw.strip():
            json.loads(raw)
    assert b"2400x1600 px" in answer.content
    assert hashlib.sha256(session.path.read_bytes()).hexdigest() == before

    missing = httpx.get(f"{stack.url}/api/v1/sessions/nope/slim")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    assert httpx.get(f"{stack.url}/api/v1/sessions/nope/images").status_code == 404
    bad = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}/slim?images=jpeg")
    assert bad.status_code == 400


def test_rescue_routes_need_the_token_under_auth(stack: GatewayStack) -> None:
    broken_session(stack.pair.root)
    stack.start_gateway(auth=True)
    for route in ("images", "slim"):
        url = f"{stack.url}/api/v1/sessions/{SESSION}/{route}"
        assert httpx.get(url).status_code == 401
        own = httpx.get(url, headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        assert own.status_code == 200
