"""A hostile HTTP/2 client: opens gRPC streams and never grants flow-control window.

`StalledClient` speaks raw HTTP/2 (the `h2` package) over
one loopback socket. It opens unary-request streaming calls and then only
answers the protocol's own SETTINGS and PING frames: it never sends a
WINDOW_UPDATE, so the server can send each stream (and the connection) at
most the initial 64 KiB window. A reader thread records each stream's end:
its `grpc-status` / `grpc-message` trailers or an RST_STREAM.

Used by the memory benchmark and by the tests of the stall timeout.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamEnd:
    """How a stream ended: its gRPC status (None if reset) and message."""

    status: int | None
    message: str = ""
    reset: bool = False


@dataclass
class StalledClient:
    """One HTTP/2 connection that opens streams and never reads their data."""

    host: str
    port: int
    token: str = ""
    ends: dict[int, StreamEnd] = field(default_factory=dict)
    received: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import h2.config
        import h2.connection

        self._sock = socket.create_connection((self.host, self.port))
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self._conn: Any = h2.connection.H2Connection(config=config)
        self._lock = threading.Lock()
        self._closed = False
        with self._lock:
            self._conn.initiate_connection()
            self._flush()
        self._thread = threading.Thread(target=self._read_loop, daemon=True)
        self._thread.start()

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data:
            self._sock.sendall(data)

    def open(self, method: str, request: bytes) -> int:
        """Start a call of `method` (`/pkg.Service/Method`) with one request; its stream id."""
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", method),
            (":authority", f"{self.host}:{self.port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        if self.token:
            headers.append(("authorization", f"Bearer {self.token}"))
        with self._lock:
            stream_id: int = self._conn.get_next_available_stream_id()
            self._conn.send_headers(stream_id, headers)
            frame = struct.pack(">BI", 0, len(request)) + request
            self._conn.send_data(stream_id, frame, end_stream=True)
            self._flush()
        return stream_id

    def _read_loop(self) -> None:
        import h2.events

        while not self._closed:
            try:
                data = self._sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                try:
                    events = self._conn.receive_data(data)
                except Exception:
                    return
                for event in events:
                    if isinstance(event, h2.events.DataReceived):
                        # Counted, never acknowledged: no WINDOW_UPDATE goes out.
                        sid = event.stream_id
                        self.received[sid] = self.received.get(sid, 0) + len(event.data)
                    elif isinstance(event, h2.events.TrailersReceived):
                        values: dict[Any, Any] = dict(event.headers)
                        status = values.get("grpc-status")
                        self.ends[event.stream_id] = StreamEnd(
                            int(status) if status is not None else None,
                            str(values.get("grpc-message", "")),
                        )
                    elif isinstance(event, h2.events.ResponseReceived):
                        values = dict(event.headers)
                        if "grpc-status" in values:  # a trailers-only answer
                            self.ends[event.stream_id] = StreamEnd(
                                int(values["grpc-status"]), str(values.get("grpc-message", ""))
                            )
                    elif isinstance(event, h2.events.StreamReset):
                        self.ends.setdefault(event.stream_id, StreamEnd(None, reset=True))
                try:
                    self._flush()  # SETTINGS and PING acknowledgements only
                except OSError:
                    return

    def grant(self, stream_ids: list[int], size: int = 1 << 30) -> None:
        """Grant window at last (connection and streams): what a stalled stream then receives."""
        with self._lock:
            self._conn.increment_flow_control_window(size)
            for sid in stream_ids:
                if sid not in self.ends:
                    self._conn.increment_flow_control_window(size, stream_id=sid)
            self._flush()

    def wait_ended(self, stream_ids: list[int], timeout: float) -> bool:
        """True once every stream has ended (trailers or reset) within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(sid in self.ends for sid in stream_ids):
                    return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        """Drop the connection (the server sees the client leave)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)
