"""SlimSession and ListImages per principal: another principal's session is NOT_FOUND, as ReadWindow.

A slim copy reads a whole transcript, so it follows the tenant rules exactly
as a window does: with auth, a session in a project the caller may not read
answers what a session that does not exist answers, and so do its sub-agents.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as hpb
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
