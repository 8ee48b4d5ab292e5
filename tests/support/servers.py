"""Helpers of the client, CLI and deploy tests: both real servers in a background event loop.

`ServerPair` runs the history and media servers (grpc.aio, 127.0.0.1) in a
thread with its own loop, over one transcripts root and one shared state dir,
so sync clients and in-process CLI runs in the test thread can call them;
`serving_pair` is the body of the fixtures that start both for one test.
Either server can be stopped and started again on the same port (the restart
tests). Also: transcript line builders with real PNG payloads.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import socket
import struct
import threading
import zlib
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson

from history_service.config import HistoryConfig
from history_service.server import RunningHistoryServer, start_history_server
from media_service.config import MediaConfig
from media_service.server import RunningMediaServer, start_media_server
from scrollback.objects import Location, parse_location
from scrollback.server.auth import SecuritySettings

T = TypeVar("T")


def free_port() -> int:
    """A port that was free a moment ago (bind to 0, release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def png(seed: int, size: int = 100) -> bytes:
    """A valid PNG whose bytes depend on `seed`, with about `size`*`size`*3 bytes of pixels."""
    raw = b"".join(
        b"\x00" + bytes((seed * 7 + x * 13 + y * 31) % 256 for x in range(size * 3))
        for y in range(size)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


def image_block(data: bytes) -> dict[str, Any]:
    """An image content block carrying `data` as base64."""
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(data).decode(),
        },
    }


def user_line(
    uuid: str, text: str, *, images: tuple[bytes, ...] = (), timestamp: str = ""
) -> bytes:
    """A Claude Code user entry line (with newline)."""
    content: Any = text
    if images:
        content = [{"type": "text", "text": text}, *(image_block(i) for i in images)]
    fields: dict[str, Any] = {
        "type": "user",
        "uuid": uuid,
        "sessionId": "x",
        "message": {"role": "user", "content": content},
    }
    if timestamp:
        fields["timestamp"] = timestamp
    return orjson.dumps(fields) + b"\n"


def assistant_line(uuid: str, text: str) -> bytes:
    """A Claude Code assistant entry line (with newline)."""
    return (
        orjson.dumps(
            {
                "type": "assistant",
                "uuid": uuid,
                "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
            }
        )
        + b"\n"
    )


class ServerPair:
    """Both services on 127.0.0.1, served from a background event loop."""

    def __init__(
        self,
        root: Path,
        state: Path,
        security: SecuritySettings | None = None,
        codex: Path | str | None = None,
        transcripts: str | None = None,
        bucket_cache_bytes: int | None = None,
        opencode: Path | None = None,
        gemini: Path | None = None,
    ) -> None:
        self.root = root
        # opencode's database (a third source), or None.
        self.opencode = opencode
        # Gemini CLI's home (its sessions under tmp/<project>/chats), or None.
        self.gemini = gemini
        # What the servers are given as their transcripts root: `root`, or a bucket's
        # `s3://bucket/prefix` (its credentials from the AWS variables of this process).
        self.location: Location = parse_location(transcripts) if transcripts else root
        # The servers' block cache of a bucket (None: the default).
        self.bucket_cache_bytes = bucket_cache_bytes
        # Codex's sessions dir (a second root), or None.
        self.codex = parse_location(codex) if codex is not None else None
        self.state = state
        # Auth and limits of both servers (None: none, the loopback default).
        self.security = security or SecuritySettings()
        root.mkdir(parents=True, exist_ok=True)
        state.mkdir(parents=True, exist_ok=True)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.history: RunningHistoryServer | None = None
        self.media: RunningMediaServer | None = None
        self.history_port = 0
        self.media_port = 0

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the servers' loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def history_addr(self) -> str:
        """HOST:PORT of the history server."""
        return f"127.0.0.1:{self.history_port}"

    @property
    def media_addr(self) -> str:
        """HOST:PORT of the media server."""
        return f"127.0.0.1:{self.media_port}"

    def transcript(self, session_id: str, project: str = "proj") -> Path:
        """The path of a session's transcript (its project dir created)."""
        directory = self.root / project
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{session_id}.jsonl"

    def start_history(self, port: int | None = None) -> None:
        """Start the history server (on `port`, or its previous port, or a new one)."""
        port = self.history_port if port is None else port
        config = HistoryConfig.from_env(
            {},
            transcripts=self.location,
            codex_sessions=self.codex,
            opencode_db=self.opencode,
            gemini_home=self.gemini,
            state_dir=self.state,
            addr=f"127.0.0.1:{port}",
            rescan_interval_seconds=0.2,
            watch_poll_seconds=0.05,
            heartbeat_seconds=0.5,
            security=self.security,
            bucket_cache_bytes=self.bucket_cache_bytes,
        )
        self.history = self.run(start_history_server(config))
        self.history_port = self.history.port

    def start_media(self, port: int | None = None) -> None:
        """Start the media server (on `port`, or its previous port, or a new one)."""
        port = self.media_port if port is None else port
        config = MediaConfig(
            transcripts=self.location,
            codex_sessions=self.codex,
            opencode_db=self.opencode,
            gemini_home=self.gemini,
            state_dir=self.state,
            addr=f"127.0.0.1:{port}",
            gc_interval_seconds=3600,
            security=self.security,
        )
        if self.bucket_cache_bytes is not None:
            config = dataclasses.replace(config, bucket_cache_bytes=self.bucket_cache_bytes)
        self.media = self.run(start_media_server(config))
        self.media_port = self.media.port

    def stop_history(self, grace: float = 0) -> None:
        """Stop the history server (the port stays remembered)."""
        if self.history is not None:
            self.run(self.history.stop(grace))
            self.history = None

    def stop_media(self, grace: float = 0) -> None:
        """Stop the media server (the port stays remembered)."""
        if self.media is not None:
            self.run(self.media.stop(grace))
            self.media = None

    def close(self) -> None:
        """Stop both servers and the loop."""
        self.stop_history()
        self.stop_media()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def serving_pair(tmp_path: Path) -> Iterator[ServerPair]:
    """History and media servers over tmp_path/root and tmp_path/state, closed afterwards."""
    pair = ServerPair(tmp_path / "root", tmp_path / "state")
    try:
        pair.start_history(0)
        pair.start_media(0)
        yield pair
    finally:
        pair.close()
