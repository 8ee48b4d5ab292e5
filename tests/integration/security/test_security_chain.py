"""The interceptor chain over a real history server: one order of refusals, one log line each.

Auth comes before the request check, the request check before the limits,
and the RPC log sees every end: a call refused at any step is logged with its
code and the principal known by then, and a call the limits refused takes
nothing from its principal's budget.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from tests.support.reasons import assert_reason
from tests.support.security import auth, eventually_admitted, text_line, write_transcript

LIST_SESSIONS = "/scrollback.history.v1.HistoryService/ListSessions"
NOT_A_MESSAGE = b"\xff"  # a field tag of no wire type: no message parses from it


def _raw_list_sessions(channel: grpc.aio.Channel) -> Any:
    """ListSessions that sends its request bytes as given."""
    return channel.unary_unary(
        LIST_SESSIONS,
        request_serializer=lambda data: data,
        response_deserializer=hpb.ListSessionsResponse.FromString,
    )


async def _refusal(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


def _rpc_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "scrollback.rpc"]


async def test_each_refusal_comes_from_its_step_in_order_and_is_logged(
    secured_pair_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scrollback.rpc")
    async with secured_pair_factory(max_streams_per_principal=1) as pair:
        write_transcript(pair.root, "proj-a", "sess-a", [text_line("u0", "hello")])
        history = pair.history_stub()
        raw = _raw_list_sessions(pair.channels[0])

        # No token and no message: auth answers first.
        refused = await _refusal(raw(NOT_A_MESSAGE))
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert_reason(refused, Reason.UNAUTHENTICATED)

        # Alice holds her one call in flight.
        watch = history.WatchSession(
            hpb.WatchSessionRequest(session_id="sess-a"), metadata=auth("alice")
        )
        await watch.read()

        # Her malformed request is refused by the request check, before the limits.
        refused = await _refusal(raw(NOT_A_MESSAGE, metadata=auth("alice")))
        assert_reason(refused, Reason.MALFORMED_REQUEST)
        # A NUL where the contract forbids one, the same.
        refused = await _refusal(
            history.ListSessions(
                hpb.ListSessionsRequest(project_dir="proj\0a"), metadata=auth("alice")
            )
        )
        assert_reason(refused, Reason.INVALID_ARGUMENT)
        assert "U+0000" in (refused.details() or "")

        # A well-formed one meets her limit; bob's budget is his own.
        refused = await _refusal(
            history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        )
        assert_reason(refused, Reason.TOO_MANY_STREAMS)
        await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("bob"))

        # The watch ends: her budget is whole again, the refusals took nothing from it.
        watch.cancel()
        await eventually_admitted(
            lambda: history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        )

    lines = _rpc_lines(caplog)
    list_lines = [line for line in lines if "method=ListSessions" in line]
    codes = [line.split("code=")[1].split()[0] for line in list_lines]
    principals = [line.split("principal=")[1].split()[0] for line in list_lines]
    # Until the server has seen the watch's cancel, alice's retries may meet her limit.
    while codes[5] == "RESOURCE_EXHAUSTED" and len(codes) > 6:
        del codes[5], principals[5]
    assert codes == [
        "UNAUTHENTICATED",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        "RESOURCE_EXHAUSTED",
        "OK",
        "OK",
    ]
    assert principals == ["-", "alice", "alice", "alice", "bob", "alice"]
    assert any("method=WatchSession code=CANCELLED" in line for line in lines)
