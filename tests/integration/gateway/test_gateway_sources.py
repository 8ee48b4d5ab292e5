"""A rollout named after a Claude Code session, through the gateway (docs/contract.md §4).

The listing names it `codex:<id>`; its window, its photos' signed URLs and the
Claude Code session of the bare id are all served, each the right one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.codex import Rollout, write_rollout
from tests.support.gateway import GatewayStack
from tests.support.media import png_bytes
from tests.support.servers import user_line


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[GatewayStack]:
    running = GatewayStack(tmp_path, codex=tmp_path / "codex" / "sessions")
    try:
        yield running
    finally:
        running.close()


def test_both_sessions_of_one_id_are_served_by_their_names(
    stack: GatewayStack, tmp_path: Path
) -> None:
    sid = str(uuid.uuid4())
    stack.pair.transcript(sid).write_bytes(user_line("u1", "the claude code session"))
    photo = png_bytes(60_000, seed=3)
    rollout = Rollout(sid)
    rollout.meta()
    rollout.user("the rollout", [photo])
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    stack.start_gateway()
    listed = httpx.get(f"{stack.url}/api/v1/sessions").json()["sessions"]
    assert sorted((s["sessionId"], s["source"]) for s in listed) == sorted(
        [(sid, "claude-code"), (f"codex:{sid}", "codex")]
    )
    claude = httpx.get(f"{stack.url}/api/v1/sessions/{sid}/window").json()
    assert [e["uuid"] for e in claude["entries"]] == ["u1"]
    codex = httpx.get(f"{stack.url}/api/v1/sessions/codex:{sid}/window").json()
    refs = [r for e in codex["entries"] for r in e["mediaRefs"]]
    assert refs and all(r["uri"].startswith(f"codex:{sid}/at-") for r in refs)
    got = httpx.get(stack.url + refs[0]["url"])
    assert (got.status_code, got.content) == (200, photo)
