"""WatchSession: resuming after disconnects with no gap and no duplicate, heartbeats, rewrites."""

from __future__ import annotations

import asyncio
import random

import grpc
import orjson

from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import HistoryHarness, collect, line


def _append(path_text: str, data: bytes) -> None:
    with open(path_text, "ab") as handle:
        handle.write(data)


async def _append_lines(path_text: str, start: int, count: int) -> None:
    for n in range(start, start + count):
        data = line(type="user", uuid=f"u{n}", n=n)
        if n % 9 == 4:  # half a line, a pause, then the rest
            _append(path_text, data[:7])
            await asyncio.sleep(0.02)  # the watch must meet a half-written line: under test
            data = data[7:]
        _append(path_text, data)
        await asyncio.sleep(0.006)  # lines arrive over many polls of the watch, as they do live


async def test_watch_resumes_with_no_gap_and_no_duplicate(history: HistoryHarness) -> None:
    path = history.transcript("w1")
    path.write_bytes(b"".join(line(type="user", uuid=f"u{n}", n=n) for n in range(5)))
    headers, page = await collect(history.stub.Bootstrap(pb.BootstrapRequest(session_id="w1")))
    assert [e.uuid for e in page.entries] == [f"u{n}" for n in range(5)]
    position = headers[0].watch_position

    async def accept_many() -> None:
        for n in range(25):
            await history.stub.AcceptMessage(
                pb.AcceptMessageRequest(client_txn_id=f"t{n}", session_id="w1", text=f"m{n}")
            )
            await asyncio.sleep(0.015)  # accepts interleave with the appends on purpose

    producers = asyncio.gather(_append_lines(str(path), 5, 120), accept_many())
    numbers: list[int] = []
    texts: list[str] = []
    rng = random.Random(7)
    deadline = asyncio.get_running_loop().time() + 30
    while (len(numbers) < 120 or len(texts) < 25) and asyncio.get_running_loop().time() < deadline:
        call = history.stub.WatchSession(pb.WatchSessionRequest(session_id="w1", position=position))
        budget = rng.randint(3, 25)
        async for event in call:
            kind = event.WhichOneof("event")
            if kind == "entry":
                numbers.append(orjson.loads(event.entry.json)["n"])
            elif kind == "accepted":
                texts.append(event.accepted.text)
            if event.position:
                position = event.position
            budget -= 1
            if budget == 0 or (len(numbers) >= 120 and len(texts) >= 25):
                break
        call.cancel()
    await producers
    assert numbers == list(range(5, 125)), "a line was lost or repeated across reconnects"
    assert texts == [f"m{n}" for n in range(25)], "an accepted message was lost or repeated"


async def test_watch_heartbeats_and_ends_on_rewrite(history: HistoryHarness) -> None:
    path = history.transcript("w2")
    path.write_bytes(line(type="user", uuid="a"))
    call = history.stub.WatchSession(pb.WatchSessionRequest(session_id="w2"))
    iterator = call.__aiter__()
    first = await asyncio.wait_for(iterator.__anext__(), 5)
    assert first.WhichOneof("event") == "heartbeat" and first.position
    path.write_bytes(line(type="user", uuid="b"))  # rewritten (truncated and rewritten in place)
    with path.open("ab") as handle:
        handle.write(line(type="user", uuid="c"))
    try:
        while True:
            event = await asyncio.wait_for(iterator.__anext__(), 5)
            assert event.WhichOneof("event") == "heartbeat"
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert str(history.tmp) not in (error.details() or "")
    # a stale position is refused from the start
    stale = first.position
    bad = history.stub.WatchSession(pb.WatchSessionRequest(session_id="w2", position=stale))
    try:
        async for _ in bad:
            pass
        raise AssertionError("expected FAILED_PRECONDITION")
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    garbage = history.stub.WatchSession(pb.WatchSessionRequest(session_id="w2", position="zz"))
    try:
        async for _ in garbage:
            pass
        raise AssertionError("expected INVALID_ARGUMENT")
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_watch_by_chat_key_sees_accepts_then_the_bound_transcript(
    history: HistoryHarness,
) -> None:
    call = history.stub.WatchSession(pb.WatchSessionRequest(chat_key="newchat"))
    iterator = call.__aiter__()

    async def next_event() -> pb.WatchSessionResponse:
        for _ in range(20):
            event = await asyncio.wait_for(iterator.__anext__(), 5)
            if event.WhichOneof("event") != "heartbeat":
                return event
        raise AssertionError("only heartbeats")

    # the watch runs "from now" once its first heartbeat arrived
    first = await asyncio.wait_for(iterator.__anext__(), 5)
    assert first.WhichOneof("event") == "heartbeat"
    await history.stub.AcceptMessage(
        pb.AcceptMessageRequest(client_txn_id="c1", chat_key="newchat", text="first")
    )
    assert (await next_event()).accepted.text == "first"
    await history.stub.BindChatKey(pb.BindChatKeyRequest(chat_key="newchat", session_id="born"))
    history.transcript("born").write_bytes(
        line(type="user", uuid="z1", message={"content": "first"})
    )
    assert (await next_event()).entry.uuid == "z1"
    call.cancel()
