"""A session of one source never shadows nor blocks another's (docs/contract.md §4, tenant rules).

Bob may write Codex rollouts, and names one after alice's Claude Code session
(its file name carries her session's id), declaring a cwd both of them see.
Over a real history + media pair with auth: alice's bare id still names her
Claude Code session in every RPC that takes a session id, the rollout is hers
to read as `codex:<id>` (how her listing and search name it), and bob, who
cannot see her project, lists and reads the rollout by its bare id, learning
nothing of her session.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.media.v1 import media_pb2
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from tests.support.codex import Rollout, write_rollout
from tests.support.media import png_bytes
from tests.support.reasons import assert_reason
from tests.support.security import TOKENS, auth, image_line, png, read_blob, write_transcript

SHARED = "/srv/shared"  # the cwd the rollout declares: a project both principals see


def _token_file(path: Path) -> Path:
    projects = {"alice": ["proj-a", SHARED], "bob": [SHARED]}
    lines = ["tokens:"]
    for name in ("alice", "bob"):
        lines += [
            f"  - token: {TOKENS[name]}",
            f"    principal: {name}",
            f"    projects: {orjson.dumps(projects[name]).decode()}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


class Sides:
    """Alice's Claude Code session and bob's rollout of the same id, with their images."""

    def __init__(self, root: Path, codex: Path) -> None:
        self.sid = str(uuid.uuid4())
        self.claude_png = png(50_000, seed=1)
        write_transcript(root, "proj-a", self.sid, [image_line("ua0", self.claude_png)])
        self.codex_png = png_bytes(60_000, seed=2)
        rollout = Rollout(self.sid)
        rollout.meta(cwd=SHARED)
        rollout.user("pelicanword from the rollout", [self.codex_png])
        write_rollout(codex, rollout)


@pytest.fixture
async def sides(secured_pair_factory: Any, tmp_path: Path) -> AsyncIterator[tuple[Any, Sides]]:
    codex = tmp_path / "codex" / "sessions"
    overrides = {"codex_sessions": codex}
    async with secured_pair_factory(
        auth_tokens=_token_file(tmp_path / "sources.yaml"),
        history_overrides=overrides,
        media_overrides=overrides,
    ) as pair:
        yield pair, Sides(pair.root, codex)


async def _window(history: Any, session_id: str, who: str) -> list[hpb.Entry]:
    entries: list[hpb.Entry] = []
    request = hpb.ReadWindowRequest(session_id=session_id, page_size=50)
    async for message in history.ReadWindow(request, metadata=auth(who)):
        kind = message.WhichOneof("item")
        if kind == "entry":
            entries.append(message.entry)
        elif kind == "entries":
            entries.extend(message.entries.entries)
    return entries


async def _search(search: Any, who: str, **request: Any) -> list[Any]:
    """Hits of a search, asked again until the indexer has reached the rollout."""
    deadline = time.monotonic() + 30
    while True:
        hits = [
            m.hit
            async for m in search.Search(
                search_pb2.SearchRequest(query="pelicanword", page_size=10, **request),
                metadata=auth(who),
            )
            if m.WhichOneof("item") == "hit"
        ]
        if hits:
            return hits
        assert time.monotonic() < deadline, "the rollout was never indexed"
        await asyncio.sleep(0.1)


def _media(ref: Any) -> media_pb2.MediaSelector:
    return media_pb2.MediaSelector(media_ref=ref)


async def test_a_rollout_named_after_a_claude_session_never_blocks_it(
    sides: tuple[Any, Sides],
) -> None:
    pair, s = sides
    history, media = pair.history_stub(), pair.media_stub()
    search = search_pb2_grpc.SearchServiceStub(pair.channels[0])
    codex_id = f"codex:{s.sid}"

    # Every RPC that takes a session id: the bare id is her Claude Code session.
    claude = await _window(history, s.sid, "alice")
    assert [e.uuid for e in claude] == ["ua0"]
    # She lists both: her session by its id, the rollout with its source.
    listed = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
    assert sorted((x.session_id, x.source) for x in listed.sessions) == sorted(
        [(s.sid, "claude-code"), (codex_id, "codex")]
    )
    assert [e.uuid for e in await _window(history, f"claude-code:{s.sid}", "alice")] == ["ua0"]
    got = await history.GetSession(hpb.GetSessionRequest(session_id=s.sid), metadata=auth("alice"))
    assert (got.session.session_id, got.session.source) == (s.sid, "claude-code")
    assert await read_blob(media, _media(claude[0].media_refs[0]), auth("alice")) == s.claude_png
    images = [
        m.image
        async for m in history.ListImages(
            hpb.ListImagesRequest(session_id=s.sid), metadata=auth("alice")
        )
        if m.WhichOneof("item") == "image"
    ]
    assert [i.session_id for i in images] == [s.sid]
    slim = [
        m
        async for m in history.SlimSession(
            hpb.SlimSessionRequest(session_id=s.sid), metadata=auth("alice")
        )
    ]
    assert slim[0].header.session_id == s.sid
    accepted = await history.AcceptMessage(
        hpb.AcceptMessageRequest(client_txn_id="t-1", session_id=s.sid, text="hi"),
        metadata=auth("alice"),
    )
    assert accepted.message.session_id == s.sid
    boot = history.Bootstrap(hpb.BootstrapRequest(session_id=s.sid), metadata=auth("alice"))
    assert [m async for m in boot]
    watch = history.WatchSession(hpb.WatchSessionRequest(session_id=s.sid), metadata=auth("alice"))
    await watch.read()  # the first event or heartbeat: the call was accepted
    watch.cancel()

    # The rollout is hers as `codex:<id>`, through the same RPCs.
    rollout = await _window(history, codex_id, "alice")
    refs = [r for e in rollout for r in e.media_refs]
    assert refs and {r.session_id for r in refs} == {codex_id}
    assert await read_blob(media, _media(refs[0]), auth("alice")) == s.codex_png
    got = await history.GetSession(
        hpb.GetSessionRequest(session_id=codex_id), metadata=auth("alice")
    )
    assert (got.session.session_id, got.session.source) == (codex_id, "codex")
    bound = await history.BindChatKey(
        hpb.BindChatKeyRequest(chat_key="chat-1", session_id=codex_id), metadata=auth("alice")
    )
    assert bound is not None
    hits = await _search(search, "alice")
    assert {h.session_id for h in hits} == {codex_id}
    assert {h.session_id for h in await _search(search, "alice", session_id=codex_id)} == {codex_id}
    assert [e.uuid for e in await _window(history, s.sid, "alice")] == ["ua0"]

    # Bob sees the rollout only, by its bare id, and nothing of alice's session.
    listed = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("bob"))
    assert [(x.session_id, x.source) for x in listed.sessions] == [(s.sid, "codex")]
    assert {h.session_id for h in await _search(search, "bob")} == {s.sid}
    theirs = await _window(history, s.sid, "bob")
    assert [e.byte_offset for e in theirs] == [e.byte_offset for e in rollout]
    for hidden in (f"claude-code:{s.sid}", "claude-code:no-such-id"):
        with pytest.raises(grpc.aio.AioRpcError) as missed:
            await _window(history, hidden, "bob")
        assert missed.value.code() == grpc.StatusCode.NOT_FOUND
        assert_reason(missed.value, Reason.SESSION_NOT_FOUND)

    # A source that does not exist is a malformed id, named as such and never echoed.
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await _window(history, f"cursor:{s.sid}", "alice")
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert s.sid not in (bad.value.details() or "")
