"""U+0000 in requests, one answer on both state backends (docs/contract.md, "Text in requests").

A message's text keeps a U+0000 exactly (accept, replay, conflict, Bootstrap,
WatchSession) on SQLite and on PostgreSQL alike; a U+0000 in any other string
(ids, chat keys, attachment names and media types, tokens, search query and
filters) is INVALID_ARGUMENT with reason INVALID_ARGUMENT and records nothing.
A transcript's `\u0000` is served exactly by windows (paged through the line
index) and indexed as U+FFFD by search and insight, the same on both backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.search.v1 import search_pb2 as spb
from scrollback.search.v1 import search_pb2_grpc
from tests.support.backends import state_backend
from tests.support.history import OLDEST, HarnessFactory, collect, expect_error, line, read_all

NUL_TEXT = "before\x00after \U0001f642\x00"
FFFD = "\ufffd"
MISSING = "media:" + "0" * 64


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """History config overrides selecting the state backend."""
    yield from state_backend(request.param)


async def test_a_message_text_keeps_its_nul_on_both_backends(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as history:
        stub = history.stub
        watch = stub.WatchSession(pb.WatchSessionRequest(chat_key="k"))
        watched = watch.__aiter__()
        await asyncio.wait_for(watched.__anext__(), 10)  # the first heartbeat: the watch is live
        request = pb.AcceptMessageRequest(client_txn_id="t1", chat_key="k", text=NUL_TEXT)
        first = await stub.AcceptMessage(request)
        assert not first.replayed and first.message.text == NUL_TEXT
        again = await stub.AcceptMessage(request)
        assert again.replayed and again.message == first.message
        await expect_error(
            stub.AcceptMessage(
                pb.AcceptMessageRequest(client_txn_id="t1", chat_key="k", text=NUL_TEXT + "\0")
            ),
            grpc.StatusCode.ALREADY_EXISTS,
            history.tmp,
            Reason.TXN_CONFLICT,
        )
        headers, _ = await collect(stub.Bootstrap(pb.BootstrapRequest(chat_key="k")))
        assert [m.text for m in headers[0].pending] == [NUL_TEXT]
        while True:
            event = await asyncio.wait_for(watched.__anext__(), 10)
            if event.WhichOneof("event") == "accepted":
                assert event.accepted == first.message
                break
        watch.cancel()


async def test_a_nul_anywhere_else_is_invalid_argument_on_both_backends(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as history:
        stub = history.stub
        search = search_pb2_grpc.SearchServiceStub(history.channel)
        history.transcript("s1").write_bytes(
            line(type="user", uuid="u0", message={"role": "user", "content": "hello"})
        )

        def accept(**fields: Any) -> Awaitable[Any]:
            values: dict[str, Any] = {"client_txn_id": "t1", "chat_key": "k", "text": "hi"}
            return stub.AcceptMessage(pb.AcceptMessageRequest(**(values | fields)))

        def attach(name: str, media_type: str) -> Awaitable[Any]:
            return accept(
                attachments=[pb.Attachment(ref=MISSING, name=name, media_type=media_type)]
            )

        def searching(**fields: Any) -> Any:
            return search.Search(spb.SearchRequest(**({"query": "hello"} | fields)))

        calls: list[Callable[[], Any]] = [
            lambda: accept(client_txn_id="t\0"),
            lambda: accept(chat_key="k\0"),
            lambda: accept(chat_key="", session_id="s1\0"),
            lambda: attach("a\0.png", "image/png"),
            lambda: attach("a.png", "image/png\0"),
            lambda: stub.BindChatKey(pb.BindChatKeyRequest(chat_key="k\0", session_id="s1")),
            lambda: stub.Bootstrap(pb.BootstrapRequest(chat_key="k\0")),
            lambda: stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", page_token="\0")),
            lambda: stub.ListSessions(pb.ListSessionsRequest(project_dir="proj\0")),
            lambda: searching(query="hello\0"),
            lambda: searching(entry_types=["user\0"]),
            lambda: searching(roles=["user", "\0"]),
            lambda: searching(project_dir="proj\0"),
            lambda: searching(session_id="s1\0"),
        ]
        for call in calls:
            await expect_error(
                call(), grpc.StatusCode.INVALID_ARGUMENT, history.tmp, Reason.INVALID_ARGUMENT
            )
        # Nothing was recorded; the same calls without the NUL are served.
        headers, _ = await collect(stub.Bootstrap(pb.BootstrapRequest(chat_key="k")))
        assert list(headers[0].pending) == []
        await expect_error(
            attach("a.png", "image/png"), grpc.StatusCode.FAILED_PRECONDITION, history.tmp
        )
        assert (await accept()).message.text == "hi"
        async for _ in searching(entry_types=["user"], roles=["user"], project_dir="proj"):
            pass


# Lines whose strings hold \u0000 where the indexes keep names: type, role, timestamp,
# message id, model, tool ids, text, and a uuid (the last of three, so the line index
# reads it from the line's text rather than its first match).
ODD_LINES = [
    line(
        type="user",
        uuid="u1",
        timestamp="2025-06-01T10:00:00Z",
        message={"role": "us\0er", "content": "hello one"},
    ),
    line(
        type="ty\0pe",
        uuid="u2",
        timestamp="2025-06-01T10:00:01Z\0",
        message={"role": "user", "content": "hello two \0 nul"},
    ),
    line(
        type="assistant",
        uuid="u3",
        timestamp="2025-06-01T10:00:02Z",
        message={
            "id": "m\0" + "1",
            "model": "mo\0del",
            "role": "assistant",
            "content": [{"type": "text", "text": "hello three"}],
            "usage": {"input_tokens": 1, "output_tokens": 2},
        },
    ),
    b'{"type":"user","uuid":"a","uuid":"b","uuid":"u\\u00004",'
    b'"message":{"role":"user","content":"hello four"}}\n',
]


async def test_a_transcripts_nul_is_served_exactly_and_indexed_alike_on_both_backends(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(search_interval_seconds=0.05, **backend) as history:
        filler = [line(type="user", uuid=f"f{n}", message={"content": "x"}) for n in range(30)]
        raw = [*filler, *ODD_LINES, *filler]
        history.transcript("s1").write_bytes(b"".join(raw))
        # Windows: every line exactly, also on pages the line index finds.
        pages = await read_all(history.stub, "s1", OLDEST, page_size=7)
        served = [entry.json.encode() + b"\n" for page in pages for entry in page]
        assert sorted(served) == sorted(raw)
        search = search_pb2_grpc.SearchServiceStub(history.channel)
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            hits = [
                m.hit
                async for m in search.Search(spb.SearchRequest(query="hello"))
                if m.HasField("hit")
            ]
            if len(hits) == 4 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert sorted(
            (h.entry_uuid, h.type, h.role, h.timestamp, h.snippet.text) for h in hits
        ) == [
            ("u1", "user", f"us{FFFD}er", "2025-06-01T10:00:00Z", "hello one"),
            ("u2", f"ty{FFFD}pe", "user", f"2025-06-01T10:00:01Z{FFFD}", f"hello two {FFFD} nul"),
            ("u3", "assistant", "assistant", "2025-06-01T10:00:02Z", "hello three"),
            (f"u{FFFD}4", "user", "user", "", "hello four"),
        ]
        session = (await stub_session(history, "s1")).insight
        counts = {c.type: c.count for c in session.entry_counts}
        assert counts == {"user": 62, f"ty{FFFD}pe": 1, "assistant": 1}
        assert [m.model for m in session.models] == [f"mo{FFFD}del"]


async def stub_session(history: Any, session_id: str) -> pb.Session:
    """The session's GetSession answer, once its insight covers the whole transcript."""
    size = history.transcript(session_id).stat().st_size
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        answer = await history.stub.GetSession(pb.GetSessionRequest(session_id=session_id))
        if answer.session.insight.indexed_bytes >= size:
            return answer.session
        assert asyncio.get_running_loop().time() < deadline, "insight never caught up"
        await asyncio.sleep(0.05)
