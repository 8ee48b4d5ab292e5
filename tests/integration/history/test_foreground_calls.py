"""Calls in flight as background work sees them (scrollback.foreground).

A real history server in this process counts each RPC in and out: right
after a window, the process is busy for the quiet time; an open watch, which
mostly waits, is not counted as work in flight, so background builds do not
wait for it.
"""

from __future__ import annotations

import asyncio

import pytest

from scrollback import foreground
from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import HarnessFactory, line, read_page


async def test_a_window_counts_and_a_watch_does_not(
    history_server: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(foreground, "QUIET_SECONDS", 30.0)
    monkeypatch.setattr(foreground, "_calls", foreground._Calls())
    async with history_server(heartbeat_seconds=0.1) as harness:
        harness.transcript("s").write_bytes(line(type="user", uuid="u1", message={"content": "hi"}))
        assert not foreground.busy()
        await read_page(harness.stub, session_id="s")
        assert foreground._calls.active == 0 and foreground.busy()

        monkeypatch.setattr(foreground, "_calls", foreground._Calls())
        watch = harness.stub.WatchSession(pb.WatchSessionRequest(session_id="s"))
        try:
            for _ in range(2):
                await asyncio.wait_for(watch.read(), 30)
            assert foreground._calls.active == 0 and not foreground.busy()
        finally:
            watch.cancel()
