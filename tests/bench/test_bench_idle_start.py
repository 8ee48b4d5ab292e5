"""The start figure's health-check poll: it sees a service serve as soon as it does.

A real gRPC health server starts listening a moment after the poll began; the poll
must return within a fraction of a second of it, not when a refused connection's
reconnect backoff (a second at first) lets the client try again.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from scrollback_app.bench.idle import _serving

# How long the server waits before it listens, and how late the poll may see it.
DELAY_SECONDS = 0.2
MOST_LATE_SECONDS = 0.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_poll_sees_a_late_server_serve_without_waiting_out_a_backoff() -> None:
    port = _free_port()
    servers: list[grpc.Server] = []
    serving_since: list[float] = []

    def start_late() -> None:
        # Nothing bound until then: the poll's first connections are refused.
        time.sleep(DELAY_SECONDS)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        servers.append(server)
        serving_since.append(time.monotonic())

    starter = threading.Thread(target=start_late)
    starter.start()
    try:
        _serving(f"127.0.0.1:{port}", time.monotonic() + 30)
        seen = time.monotonic()
        starter.join()
        assert seen - serving_since[0] < MOST_LATE_SECONDS
    finally:
        starter.join()
        for server in servers:
            server.stop(None)
