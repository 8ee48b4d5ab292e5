"""A watch resumes from its position when the server ends the stream as it stops.

A server being stopped ends its calls UNAVAILABLE or, as it cancels them,
CANCELLED. The server here is a real gRPC server on 127.0.0.1 whose first
WatchSession ends CANCELLED after one heartbeat, as a stopping server's does,
and whose second serves on from the position it is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from client import HistoryClient
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc


class _StoppingOnce(history_pb2_grpc.HistoryServiceServicer):
    """The first watch is cancelled by the server after one heartbeat; the next ends cleanly."""

    def __init__(self) -> None:
        self.positions: list[str] = []

    def WatchSession(
        self, request: hpb.WatchSessionRequest, context: Any
    ) -> Iterator[hpb.WatchSessionResponse]:
        self.positions.append(request.position)
        number = len(self.positions)
        yield hpb.WatchSessionResponse(heartbeat=hpb.Heartbeat(), position=f"p{number}")
        if number == 1:
            context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")


def test_a_watch_resumes_after_the_server_cancels_it() -> None:
    servicer = _StoppingOnce()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    history_pb2_grpc.add_HistoryServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with HistoryClient(f"127.0.0.1:{port}") as history:
            events = list(history.watch("s1", "p0", heartbeats=True))
    finally:
        server.stop(0)
    assert [event.position for event in events] == ["p1", "p2"]
    # The second call resumed from the position after the last event seen.
    assert servicer.positions == ["p0", "p1"]
