"""Helpers of the security tests: token files, transcripts, a server pair, subprocess servers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from history_service.server import RunningHistoryServer
from media_service.server import RunningMediaServer
from scrollback.contract.stripping import strip_line
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token", "admin": "admin-secret-token"}
PROJECTS = {"alice": ["proj-a"], "bob": ["proj-b"], "admin": ["*"]}
# A server's start-up line names the port it bound (it is started on port 0).
LISTENING_PORT = re.compile(r"listening on \S*:(\d+)")


def write_token_file(path: Path) -> Path:
    """A YAML token file: alice sees proj-a, bob proj-b, admin everything (sha256 for two)."""
    lines = ["tokens:"]
    for name, token in TOKENS.items():
        if name == "admin":
            lines.append(f"  - token: {token}")
        else:
            lines.append(f"  - token_sha256: {hashlib.sha256(token.encode()).hexdigest()}")
        lines.append(f"    principal: {name}")
        lines.append(f"    projects: {json.dumps(PROJECTS[name])}")
    path.write_text("\n".join(lines) + "\n")
    return path


def auth(name: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying a principal's bearer token."""
    return (("authorization", f"Bearer {TOKENS[name]}"),)


def png(size: int, seed: int = 0) -> bytes:
    """Bytes that sniff as PNG."""
    body = bytes((i * 31 + seed * 7) % 251 for i in range(size - len(PNG_MAGIC)))
    return PNG_MAGIC + body


def image_line(uuid: str, data: bytes) -> bytes:
    """A user entry holding one base64 image."""
    block = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(data).decode(),
        },
    }
    entry = {"type": "user", "uuid": uuid, "message": {"role": "user", "content": [block]}}
    return json.dumps(entry, separators=(",", ":")).encode()


def text_line(uuid: str, text: str) -> bytes:
    """A user entry with text."""
    entry = {"type": "user", "uuid": uuid, "message": {"role": "user", "content": text}}
    return json.dumps(entry, separators=(",", ":")).encode()


def write_transcript(root: Path, project: str, session_id: str, lines: list[bytes]) -> Path:
    """`<root>/<project>/<session_id>.jsonl`."""
    folder = root / project
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def media_ref(session_id: str, line: bytes, index: int = 0) -> ref_pb2.MediaRef:
    """The ref the history service mints for a line's image."""
    stripped = strip_line(line)
    assert stripped is not None
    image = stripped.images[index]
    return ref_pb2.MediaRef(
        session_id=session_id, entry_uuid=stripped.uuid, index=image.index, pin=image.pin
    )


async def upload(
    stub: media_pb2_grpc.MediaServiceStub,
    data: bytes,
    metadata: Any = None,
    chunk: int = 1 << 20,
) -> media_pb2.WriteBlobResponse:
    """WriteBlob in chunks."""

    async def requests() -> Any:
        yield media_pb2.WriteBlobRequest(
            header=media_pb2.WriteBlobHeader(
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                media_type="image/png",
            )
        )
        for at in range(0, len(data), chunk):
            yield media_pb2.WriteBlobRequest(data=data[at : at + chunk])

    response: media_pb2.WriteBlobResponse = await stub.WriteBlob(requests(), metadata=metadata)
    return response


async def read_blob(
    stub: media_pb2_grpc.MediaServiceStub, selector: media_pb2.MediaSelector, metadata: Any = None
) -> bytes:
    """The bytes of one ReadMedia call."""
    chunks = []
    async for message in stub.ReadMedia(
        media_pb2.ReadMediaRequest(media=selector), metadata=metadata
    ):
        if message.WhichOneof("item") == "data":
            chunks.append(message.data)
    return b"".join(chunks)


async def status_of(call: Any) -> grpc.StatusCode:
    """Await a unary call or drain a stream; return its status code."""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


@dataclass
class Pair:
    """A history and a media server over one root and state dir."""

    root: Path
    state: Path
    history: RunningHistoryServer
    media: RunningMediaServer
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    def history_stub(self) -> history_pb2_grpc.HistoryServiceStub:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.history.port}")
        self.channels.append(channel)
        return history_pb2_grpc.HistoryServiceStub(channel)

    def media_stub(self) -> media_pb2_grpc.MediaServiceStub:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.media.port}")
        self.channels.append(channel)
        return media_pb2_grpc.MediaServiceStub(channel)


def db_counts(state: Path) -> dict[str, int]:
    """Row counts of the state tables."""
    connection = sqlite3.connect(state / "scrollback.db")
    try:
        return {
            table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("blob", "blob_ref", "accepted_message", "chat_binding", "blob_owner")
        }
    finally:
        connection.close()


def blob_files(state: Path) -> list[str]:
    """Every file under the blob dir."""
    root = state / "blobs"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


class ServerProcess:
    """`python -m history_service|media_service` as a child process on 127.0.0.1:0."""

    def __init__(
        self,
        module: str,
        root: Path,
        state: Path,
        *,
        env: dict[str, str] | None = None,
        preexec: str = "",
        workers: int = 1,
    ) -> None:
        # One process by default: these tests kill, signal and measure the process
        # that serves (worker trees have their own tests, tests/integration/workers).
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
        args = ["--transcripts", str(root), "--state", str(state), "--addr", "127.0.0.1:0"]
        args += ["--workers", str(workers)]
        if preexec:
            code = f"{preexec}\nimport runpy, sys\nsys.argv=['{module}', *{args!r}]\nrunpy.run_module('{module}', run_name='__main__')"
            command = [sys.executable, "-c", code]
        else:
            command = [sys.executable, "-m", module, *args]
        self.process = subprocess.Popen(
            command,
            env=full_env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            cwd=str(state.parent),
        )
        self.lines: list[str] = []
        self._port: int | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(20) or self._port is None:
            self.kill()
            raise RuntimeError("server did not start: " + "".join(self.lines[-20:]))

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            text = raw.decode(errors="replace")
            self.lines.append(text)
            match = LISTENING_PORT.search(text)
            if match and self._port is None:
                self._port = int(match.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def port(self) -> int:
        assert self._port is not None
        return self._port

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(20)


def port_from_log(log: Path, process: subprocess.Popen[bytes], deadline: float) -> int:
    """The port a server started on port 0 bound, read from the start-up line of its log file.

    A port picked beforehand and handed to the server can be taken by another
    process in between; a server binding port 0 itself cannot lose that race.
    A server of several workers is waited for until it says they all serve: the
    first worker listens while the others still start, and one of those may yet
    fail (its start is not over) if the test breaks something right away.
    """
    while True:
        text = log.read_text(errors="replace")
        match = LISTENING_PORT.search(text)
        if match and ("(worker " not in text or " workers listening on " in text):
            return int(match.group(1))
        assert process.poll() is None, text
        assert time.monotonic() < deadline, "the server never said where it listens"
        time.sleep(0.05)


def rss_kib(pid: int) -> int:
    """Resident set size of a process, KiB (Linux)."""
    for text in Path(f"/proc/{pid}/status").read_text().splitlines():
        if text.startswith("VmRSS:"):
            return int(text.split()[1])
    return 0


async def eventually_admitted(call: Callable[[], Awaitable[Any]], within: float = 5.0) -> Any:
    """Repeat `call()` until the per-principal limit admits it; its result.

    A cancelled call's slot is given back when the server has seen the cancel,
    a moment after the client sent it; until then the limit still counts it.
    """
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.02)


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    """Poll a predicate until true or timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
