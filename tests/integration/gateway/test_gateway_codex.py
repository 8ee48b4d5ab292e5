"""Codex rollouts through the gateway: listed with their source, photos served by offset refs."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.codex import CWD, full_rollout, write_rollout
from tests.support.gateway import GatewayStack


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
