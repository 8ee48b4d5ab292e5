"""Helpers of the gateway tests: both services and the gateway on 127.0.0.1:0, request counts.

`GatewayStack` runs the history and media servers (client_helpers.ServerPair)
and the gateway (a real uvicorn server) in one background loop; every HTTP
request the gateway answers is recorded (method, path, status) by a small
ASGI wrapper, so tests count photo fetches at the gateway. `RawConnection`
is a client socket that sends what a test says and reads only when asked
(half-sent requests, downloads that never read their body).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config import GatewayConfig
from gateway.server import RunningGateway, start_gateway
from scrollback.server.auth import SecuritySettings
from tests.support.servers import ServerPair, assistant_line, png, user_line

REPO = Path(__file__).resolve().parents[2]  # tests/support/gateway.py -> the repository
SESSION = "sess-browser"
TOKENS = {"alice": "alice-token-0123", "bob": "bob-token-4567", "gateway": "gateway-token-89ab"}


def artifacts_dir() -> Path:
    """Where screenshots go: $SCROLLBACK_TEST_ARTIFACTS or ./test-artifacts (gitignored)."""
    path = Path(os.environ.get("SCROLLBACK_TEST_ARTIFACTS") or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Hit:
    """One answered request."""

    method: str
    path: str
    status: int


@dataclass
class RequestLog:
    """What the gateway answered, in order (thread-safe)."""

    hits: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        """Forget what was recorded."""
        with self.lock:
            self.hits.clear()

    def media(self) -> list[Hit]:
        """The photo requests."""
        with self.lock:
            return [hit for hit in self.hits if hit.path.startswith("/api/v1/media/")]

    def wrap(self, app: Any) -> Any:
        """ASGI middleware recording each HTTP answer's status."""

        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return

            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    with self.lock:
                        self.hits.append(Hit(scope["method"], scope["path"], message["status"]))
                await send(message)

            await app(scope, receive, sending)

        return recorded


def write_tokens(path: Path, projects: dict[str, list[str]]) -> Path:
    """A token file of TOKENS: each principal sees `projects[name]`; the gateway is a delegate."""
    lines = ["tokens:"]
    for name, token in TOKENS.items():
        lines += [f"  - token: {token}", f"    principal: {name}"]
        lines.append(f"    projects: {projects.get(name, [])!r}")
        if name == "gateway":
            lines.append("    delegate: [ReadMedia, StatMedia]")
    path.write_text("\n".join(lines) + "\n")
    return path


class GatewayStack:
    """History, media and the gateway, all on 127.0.0.1 ports picked by the kernel.

    With `tenants` (principal -> projects), both services run with that token
    file too (and `max_streams` calls in flight per principal); otherwise they
    run without auth (with `security`, e.g. TLS, when given) and only the gateway
    checks tokens.
    """

    def __init__(
        self,
        tmp_path: Path,
        *,
        tenants: dict[str, list[str]] | None = None,
        max_streams: int = 64,
        codex: Path | None = None,
        security: SecuritySettings | None = None,
        opencode: Path | None = None,
        gemini: Path | None = None,
    ) -> None:
        self.tokens_file: Path | None = None
        if tenants is not None:
            self.tokens_file = write_tokens(tmp_path / "tenants.yaml", tenants)
            security = SecuritySettings(
                auth_tokens=self.tokens_file, max_streams_per_principal=max_streams
            )
        self.pair = ServerPair(
            tmp_path / "root",
            tmp_path / "state",
            security,
            codex,
            opencode=opencode,
            gemini=gemini,
        )
        self.tmp = tmp_path
        self.log = RequestLog()
        self.gateway: RunningGateway | None = None
        self.config: GatewayConfig | None = None
        self.pair.start_history(0)
        self.pair.start_media(0)

    def start_gateway(
        self, *, auth: bool = False, ttl: int = 86400, media_addr: str = "", **settings: Any
    ) -> GatewayConfig:
        """Start the gateway (with a token file and its own token when `auth`; `media_addr`:
        another media server than the stack's; `settings`: other GatewayConfig fields)."""
        key = self.tmp / "signing.key"
        key.write_bytes(os.urandom(32).hex().encode())
        fields: dict[str, Any] = {}
        if auth:
            tokens = self.tokens_file or write_tokens(
                self.tmp / "tokens.yaml", {"alice": ["*"], "bob": ["*"]}
            )
            own = self.tmp / "gateway.token"
            own.write_text(TOKENS["gateway"])
            fields = {"auth_tokens": tokens, "token_file": own}
        config = GatewayConfig(
            addr="127.0.0.1:0",
            history_addr=self.pair.history_addr,
            media_addr=media_addr or self.pair.media_addr,
            signing_key_file=key,
            url_ttl_seconds=ttl,
            **fields,
            **settings,
        ).validate()
        self.config = config
        self.gateway = self.pair.run(start_gateway(config, self.log.wrap))
        return config

    @property
    def url(self) -> str:
        """The gateway's base URL."""
        assert self.gateway is not None
        return f"http://127.0.0.1:{self.gateway.port}"

    def close(self) -> None:
        """Stop the gateway and both services."""
        if self.gateway is not None:
            self.pair.run(self.gateway.stop())
        self.pair.close()


def photo_session(stack: GatewayStack, entries: int = 400, photos: int = 60) -> list[str]:
    """A session of `entries` lines with `photos` distinct PNGs spread evenly; the photo uuids."""
    lines: list[bytes] = []
    photo_uuids: list[str] = []
    every = entries / photos
    next_photo = 0.0
    for number in range(entries):
        uuid = f"e{number:04d}"
        if number >= next_photo and len(photo_uuids) < photos:
            next_photo += every
            photo_uuids.append(uuid)
            lines.append(
                user_line(uuid, f"photo {len(photo_uuids)}", images=(png(len(photo_uuids), 110),))
            )
        elif number % 2:
            lines.append(assistant_line(uuid, f"answer {number}: " + "words " * (number % 7 * 6)))
        else:
            lines.append(user_line(uuid, f"question {number}"))
    stack.pair.transcript(SESSION).write_bytes(b"".join(lines))
    return photo_uuids


class RawConnection:
    """One TCP connection to the gateway, written and read only as the test says."""

    def __init__(self, port: int, *, receive_buffer: int = 0, source: str = "") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if source:
            # Another loopback address (127.0.0.2, ...): another client, as the gateway sees it.
            self.sock.bind((source, 0))
        if receive_buffer:
            # Set before connecting, so the window the client offers stays this small.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.received = b""
        self.closed = False

    def send(self, data: bytes) -> None:
        """Send `data` (all of it)."""
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)

    def poll(self, limit: int = 1 << 16) -> None:
        """Read what has arrived, up to `limit` bytes in all; note when the server closed."""
        while not self.closed and len(self.received) < limit:
            try:
                data = self.sock.recv(limit - len(self.received))
            except BlockingIOError:
                return
            except ConnectionError:
                self.closed = True
                return
            if not data:
                self.closed = True
                return
            self.received += data

    def close(self) -> None:
        """Close the client's end."""
        self.sock.close()


def has_whole_response(connection: RawConnection) -> bool:
    """True once a response's head and its whole Content-Length body have arrived."""
    head, sep, body = connection.received.partition(b"\r\n\r\n")
    if not sep:
        return False
    lengths = [
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ]
    return bool(lengths) and len(body) >= lengths[0]


def poll_until(
    connections: list[RawConnection], done: Any, timeout: float, limit: int = 1 << 16
) -> bool:
    """Poll every connection until `done(connection)` holds for all, or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        for connection in connections:
            connection.poll(limit)
        if all(done(connection) for connection in connections):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
