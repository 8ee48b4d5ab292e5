"""Session insight per principal (issue 17): GetSession and ListSessions see what ReadWindow sees.

On both state backends, with auth: another principal's session is NOT_FOUND
for GetSession with the same text as a session that does not exist, and a
listing carries insight only for the caller's own sessions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as hpb
from tests.support.backends import state_backend
from tests.support.security import auth, write_transcript


def _assistant(uuid: str, message_id: str, output: int) -> bytes:
    entry = {
        "type": "assistant",
        "uuid": uuid,
        "message": {
            "id": message_id,
            "model": "claude-haiku-4-5",
            "usage": {"output_tokens": output},
        },
    }
    return json.dumps(entry).encode()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield from state_backend(request.param)


@pytest.fixture
async def pair(secured_pair_factory: Any, backend: dict[str, Any]) -> AsyncIterator[Any]:
    async with secured_pair_factory(history_overrides=backend) as started:
        write_transcript(started.root, "proj-a", "sess-a", [_assistant("a1", "m1", 3)])
        write_transcript(started.root, "proj-b", "sess-b", [_assistant("b1", "m2", 7)] * 2)
        yield started


async def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code(), raised.value.details() or ""


async def test_another_principals_session_is_not_found(pair: Any) -> None:
    history = pair.history_stub()
    own = await history.GetSession(
        hpb.GetSessionRequest(session_id="sess-a"), metadata=auth("alice")
    )
    assert own.session.insight.usage.output_tokens == 3
    # Bob's session was indexed (by bob) before alice asks: still NOT_FOUND for her.
    theirs = await history.GetSession(
        hpb.GetSessionRequest(session_id="sess-b"), metadata=auth("bob")
    )
    assert theirs.session.insight.usage.output_tokens == 7
    hidden = await _code(
        history.GetSession(hpb.GetSessionRequest(session_id="sess-b"), metadata=auth("alice"))
    )
    missing = await _code(
        history.GetSession(hpb.GetSessionRequest(session_id="sess-zz"), metadata=auth("alice"))
    )
    assert hidden == missing and hidden[0] == grpc.StatusCode.NOT_FOUND
    unauthenticated = await _code(history.GetSession(hpb.GetSessionRequest(session_id="sess-a")))
    assert unauthenticated[0] == grpc.StatusCode.UNAUTHENTICATED
    listed = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
    assert [(s.session_id, s.insight.usage.output_tokens) for s in listed.sessions] == [
        ("sess-a", 3)
    ]
