"""Servers under benchmark as subprocesses, so each one's memory is its own.

`ServerProcess` starts `python -m <module> --addr 127.0.0.1:<port> ...` on a
free loopback port, waits for its gRPC health check to say SERVING, and reads
its resident memory from `/proc/<pid>/status` (VmRSS now, VmHWM the peak),
summed over the process and its children: a service with several workers
(scrollback.server.workers) is a parent and N worker processes, and its
memory is all of theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

START_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def proc_status_kib(pid: int, field: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM), in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc/<pid>/task/<tid>/children).

    Every thread's list: a child belongs to the thread that started it, and
    `scrollback up` starts its workers from a thread other than its main one.
    """
    found = [pid]
    for each in found:
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{each}/task"):
                with (
                    contextlib.suppress(OSError),
                    open(f"/proc/{each}/task/{task}/children", encoding="ascii") as handle,
                ):
                    found.extend(int(child) for child in handle.read().split())
    return found


def tree_status_kib(pid: int, field: str) -> int:
    """A `kB` field summed over the process tree (processes gone meanwhile count 0)."""
    total = 0
    for each in process_tree(pid):
        with contextlib.suppress(OSError, KeyError):
            total += proc_status_kib(each, field)
    return total


class ServerProcess:
    """One server subprocess: `async with ServerProcess(module, args) as server`."""

    def __init__(
        self,
        module: str,
        args: Sequence[str],
        name: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.module = module
        self.args = list(args)
        self.name = name or module
        # SCROLLBACK_* settings of this server alone (the bench's own environment's are dropped).
        self.settings = dict(settings or {})
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  # closed in __aexit__

    @property
    def pid(self) -> int:
        """The server's process id."""
        assert self._process is not None, "not started"
        return self._process.pid

    def rss_bytes(self) -> int:
        """Resident memory now, of the whole service (parent and workers)."""
        return tree_status_kib(self.pid, "VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        """The sum of every process's peak resident memory (VmHWM): an upper bound of
        the whole service's peak, since the processes need not peak at once."""
        return tree_status_kib(self.pid, "VmHWM") * 1024

    def worker_count(self) -> int:
        """The processes serving: the workers under a parent, or the process alone."""
        return max(1, len(process_tree(self.pid)) - 1)

    def _log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:].decode("utf-8", "replace")

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
        env.update(self.settings)
        return subprocess.Popen(
            [sys.executable, "-m", self.module, "--addr", self.addr, *self.args],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    async def start(self) -> None:
        """Spawn the process and wait until its health check says SERVING."""
        self._process = self._spawn()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        async with grpc.aio.insecure_channel(self.addr) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited at start:\n{self._log_tail()}")
                try:
                    reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                if time.monotonic() > deadline:
                    await self.stop()
                    raise RuntimeError(f"{self.name} did not start:\n{self._log_tail()}")
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 10)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait, 10)

    async def __aenter__(self) -> ServerProcess:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.stop()
        with contextlib.suppress(OSError):
            self._log.close()


def history_server(
    transcripts: Path | str,
    state: Path,
    auth_tokens: Path | None = None,
    *,
    search_indexing: bool = False,
    codex_sessions: Path | None = None,
    gemini_home: Path | None = None,
    settings: Mapping[str, str] | None = None,
) -> ServerProcess:
    """`python -m history_service` over a transcripts root (with a token file if given).

    The root is a directory or an `s3://bucket/prefix` string (its AWS variables in `settings`).

    Search indexing is off unless asked for: a background catch-up over the
    benchmark's transcripts would share the CPU with what the others measure.
    """
    state.mkdir(parents=True, exist_ok=True)
    auth = ["--auth-tokens", str(auth_tokens)] if auth_tokens is not None else []
    indexing = [] if search_indexing else ["--no-search-indexing"]
    codex = ["--codex-sessions", str(codex_sessions)] if codex_sessions is not None else []
    if gemini_home is not None:
        codex += ["--gemini-home", str(gemini_home)]
    return ServerProcess(
        "history_service",
        ["--transcripts", str(transcripts), "--state", str(state), *auth, *indexing, *codex],
        name="history server",
        settings=settings,
    )


def media_server(
    transcripts: Path | str,
    state: Path,
    *,
    codex_sessions: Path | None = None,
    settings: Mapping[str, str] | None = None,
) -> ServerProcess:
    """`python -m media_service` over a transcripts root, a directory or `s3://...` (and a Codex
    sessions dir if given)."""
    state.mkdir(parents=True, exist_ok=True)
    codex = ["--codex-sessions", str(codex_sessions)] if codex_sessions is not None else []
    return ServerProcess(
        "media_service",
        ["--transcripts", str(transcripts), "--state", str(state), *codex],
        name="media server",
        settings=settings,
    )


def floor_server(image: Path, window: Path | None, workers: int = 1) -> ServerProcess:
    """The bare grpc.aio floor server (`scrollback_app.bench.floor`), `workers` processes."""
    args = ["--image", str(image), "--workers", str(workers)]
    if window is not None:
        args += ["--window", str(window)]
    return ServerProcess("scrollback_app.bench.floor", args, name="floor server")
