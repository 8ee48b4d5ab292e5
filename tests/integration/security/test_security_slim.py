"""SlimSession and ListImages per principal: another principal's session is NOT_FOUND, as ReadWindow.

A slim copy reads a whole transcript, so it follows the tenant rules exactly
as a window does: with auth, a session in a project the caller may not read
answers what a session that does not exist answers, and so do its sub-agents.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as hpb
from scrollback_app.bench.thumbnails import flat_png
from tests.support.reasons import assert_reason
from tests.support.rescue import image_block, line, picture
from tests.support.security import auth, write_transcript


@pytest.fixture
async def pair(secured_pair_factory: Any) -> AsyncIterator[Any]:
    async with secured_pair_factory() as started:
        entry = {
            "type": "user",
            "uuid": "u1",
            "sessionId": "x",
            "message": {"role": "user", "content": [image_block(picture(40, 30))]},
        }
        write_transcript(started.root, "proj-a", "sess-a", [line(entry).rstrip(b"\n")])
        write_transcript(started.root, "proj-b", "sess-b", [line(entry).rstrip(b"\n")])
        yield started


async def _failure(call: Any) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in call:
            pass
    error = raised.value
    return error.code(), error.details() or "", str(assert_reason(error))


async def test_another_principals_session_is_not_found(pair: Any) -> None:
    history = pair.history_stub()
    own = [
        m
        async for m in history.SlimSession(
            hpb.SlimSessionRequest(session_id="sess-a"), metadata=auth("alice")
        )
    ]
    assert [m.WhichOneof("item") for m in own] == ["header", "file", "data", "file_end"]
    assert own[3].file_end.images_replaced == 1
    listed = [
        m
        async for m in history.ListImages(
            hpb.ListImagesRequest(session_id="sess-a"), metadata=auth("alice")
        )
    ]
    assert listed[0].image.width == 40 and listed[-1].totals.images == 1

    for call in (history.SlimSession, history.ListImages):
        request_type = (
            hpb.SlimSessionRequest if call is history.SlimSession else hpb.ListImagesRequest
        )
        hidden = await _failure(call(request_type(session_id="sess-b"), metadata=auth("alice")))
        missing = await _failure(call(request_type(session_id="sess-zz"), metadata=auth("alice")))
        assert hidden == missing
        assert hidden[0] == grpc.StatusCode.NOT_FOUND and hidden[2] == "SESSION_NOT_FOUND"


async def test_downscales_take_fair_turns_between_principals(secured_pair_factory: Any) -> None:
    """On one decode thread, alice's three 64 MP downscales delay bob's by one decode at most."""
    async with secured_pair_factory(history_overrides={"decode_threads": 1}) as started:
        for n in range(3):
            write_transcript(started.root, "proj-a", f"big-{n}", [image_line(f"big-{n}")])
        write_transcript(started.root, "proj-b", "bobs", [image_line("bobs")])
        decodes = started.history.core.decodes
        history = started.history_stub()
        finished: list[str] = []

        async def downscale(who: str, session_id: str) -> None:
            request = hpb.SlimSessionRequest(
                session_id=session_id, images=hpb.SLIM_IMAGES_DOWNSCALE
            )
            async for message in history.SlimSession(request, metadata=auth(who), timeout=120):
                if message.HasField("file_end"):
                    assert message.file_end.images_downscaled == 1
            finished.append(session_id)

        alices = [asyncio.create_task(downscale("alice", f"big-{n}")) for n in range(3)]
        await until(lambda: decodes.running == 1 and decodes.queued == 2)
        bobs = asyncio.create_task(downscale("bob", "bobs"))
        await until(lambda: decodes.queued == 3 or bobs.done())
        await asyncio.gather(*alices, bobs)
    # Bob's turn came as soon as alice's first decode freed the thread.
    assert finished.index("bobs") == 1, finished
    assert decodes.reserved == 0 and decodes.queued == 0


def image_line(session_id: str) -> bytes:
    """A line pasting a one-colour 8000x8000 RGBA PNG (256 MB of pixels, 0.27 MB of file)."""
    entry = {
        "type": "user",
        "uuid": "u1",
        "sessionId": session_id,
        "message": {"role": "user", "content": [image_block(flat_png(8000, 8000, (1, 2, 3, 255)))]},
    }
    return line(entry).rstrip(b"\n")


async def until(condition: Callable[[], bool]) -> None:
    """Poll `condition()` until it holds, within a deadline."""
    deadline = asyncio.get_running_loop().time() + 60
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "never held"
        await asyncio.sleep(0.01)
