"""A window's entries are served records or held-back places; the bytes are history_service.window_wire's.

Two real servers read the same transcripts, one with the entry cache (which
wraps each window's line server and keeps entries encoded) and one without it
(every entry encoded as it is sent): every page of every window, both
directions, both media modes, batched and not, cold and again once cached,
is the same bytes on the wire. The transcripts hold every kind of entry: small
ones, one held back from its window, one whose json goes in chunks, an
oversize stub, blank lines, a line that is not an object, an unterminated
tail, and (a real session from the corpus) tool uses whose sub-agent is linked.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import grpc

from history_service.lines import MediaMode, ServedLine
from history_service.window_wire import EncodedEntry
from history_service.windows import HeldBack, WindowParams
from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import LATEST, OLDEST, HarnessFactory

READ_WINDOW = "/scrollback.history.v1.HistoryService/ReadWindow"
KEY_FILE = "history-token.key"
SESSION = "mixed"
CORPUS = Path(__file__).resolve().parents[2] / "corpus"
# A real session with a sub-agent (its Task tool use is linked to the agent's transcript).
PARENT = "ef958aa1-0e93-49f0-bb71-150f63befcd1"
AGENT = "agent-a4ca7529859c158c2"
PREFIX = "iansherr__claude-code-log/test__test_data__real_projects__-experiments-worktrees__"


def _line(**fields: Any) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def _image(raw_bytes: int) -> dict[str, Any]:
    data = base64.b64encode(os.urandom(raw_bytes)).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def _transcripts(root: Path) -> None:
    # Text with spaces: a long run of base64 characters would be cut as a payload.
    lines = [
        _line(type="user", uuid="first", message={"content": "hi"}),
        b"\n",
        b"   \n",
        b"not an object\n",
        _line(type="user", uuid="held", message={"content": "held back " * 40_000}),
        _line(type="user", uuid="image", message={"content": [_image(40_000), {"type": "text"}]}),
        _line(
            type="assistant",
            uuid="task",
            message={"content": [{"type": "tool_use", "id": "toolu_01", "name": "Task"}]},
        ),
        _line(type="user", uuid="chunked", message={"content": "in chunks " * 400_000}),
        _line(type="user", uuid="inline", message={"content": [_image(3_000_000)]}),
        _line(type="user", uuid="over", pad="over size " * 1_700_000),
    ]
    lines += [
        _line(type="user", uuid=f"n{k}", message={"content": "w" * (k * 37 % 3000)})
        for k in range(120)
    ]
    project = root / "proj"
    project.mkdir(parents=True, exist_ok=True)
    (project / f"{SESSION}.jsonl").write_bytes(b"".join(lines) + b'{"type":"user","uuid":"tail"}')
    agents = root / "-experiments-worktrees" / PARENT / "subagents"
    agents.mkdir(parents=True)
    shutil.copy(CORPUS / f"{PREFIX}{PARENT}.jsonl", agents.parent.parent / f"{PARENT}.jsonl")
    shutil.copy(CORPUS / f"{PREFIX}{PARENT}__subagents__{AGENT}.jsonl", agents / f"{AGENT}.jsonl")


async def _pages(channel: grpc.aio.Channel, **request: Any) -> list[list[bytes]]:
    call = channel.unary_stream(
        READ_WINDOW,
        request_serializer=pb.ReadWindowRequest.SerializeToString,
        response_deserializer=bytes,
    )
    pages: list[list[bytes]] = []
    token = ""
    while True:
        page = [wire async for wire in call(pb.ReadWindowRequest(page_token=token, **request))]
        pages.append(page)
        token = pb.ReadWindowResponse.FromString(page[-1]).end.next_page_token
        if not token:
            return pages


async def test_the_same_bytes_with_and_without_the_entry_cache(
    history_server: HarnessFactory, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    _transcripts(root)
    settings = {"transcripts": root}
    async with history_server(
        state_dir=tmp_path / "plain", entry_cache_bytes=0, **settings
    ) as plain:
        # The same token key: page tokens are the same bytes too.
        (tmp_path / "cached").mkdir()
        shutil.copyfile(tmp_path / "plain" / KEY_FILE, tmp_path / "cached" / KEY_FILE)
        async with history_server(state_dir=tmp_path / "cached", **settings) as cached:
            cache = cached.server.core.entry_cache
            assert cache is not None and plain.server.core.entry_cache is None
            for harness in (plain, cached):  # the sub-agent links indexed
                parent = pb.GetSessionRequest(session_id=PARENT)
                assert (await harness.stub.GetSession(parent)).session.subagent_count == 1
            compared = linked = 0
            for session_id, direction in itertools.product((SESSION, PARENT), (LATEST, OLDEST)):
                for _ in range(2):  # cold, then from the cache
                    for mode in (pb.MEDIA_MODE_DEFERRED, pb.MEDIA_MODE_INLINE):
                        for batch in (0, 1 << 20):
                            request = {
                                "session_id": session_id,
                                "page_size": 7,
                                "direction": direction,
                                "media_mode": mode,
                                "max_batch_bytes": batch,
                            }
                            expected = await _pages(plain.channel, **request)
                            assert await _pages(cached.channel, **request) == expected
                            compared += sum(map(len, expected))
                            linked += sum(
                                b"toolu_" in w and AGENT.encode() in w for p in expected for w in p
                            )
            assert cache.hits > 0 and linked > 0
            assert compared > 500
            # What the windows held: served records and held-back places, encoded ones
            # only where the cache wrapped the window's server.
            params = WindowParams(SESSION, 200, "", OLDEST, MediaMode.DEFERRED, 32 * 1024)
            for harness, kinds in (
                (plain, {ServedLine, HeldBack}),
                (cached, {ServedLine, HeldBack, EncodedEntry}),
            ):
                window, _ = harness.server.core.reader.read_with_transcript(None, params)
                assert {type(entry) for entry in window.entries} == kinds
