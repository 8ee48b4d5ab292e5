"""Helpers of the multi-worker tests: a service started as a real process tree, and its workers.

`WorkerService` runs `python -m <service> --workers N` (on 127.0.0.1:0 unless
told), drains its stderr in a thread (the workers log every RPC there), and
learns the port from the parent's `N workers listening on HOST:PORT` line (a
service of one process logs `... service listening on HOST:PORT`). `channel_on_new_worker`
opens channels with their own connection until one lands on a worker not
seen yet, told by the `scrollback-worker-pid` trailing metadata.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

LISTENING = re.compile(r"(\d+) workers listening on \S*:(\d+)")
# A service of one process (the history service's line).
LISTENING_ALONE = re.compile(r"() service listening on \S*:(\d+)")
METRICS = re.compile(r"metrics on port (\d+)")
WORKER_PID_KEY = "scrollback-worker-pid"


class WorkerService:
    """One service run as a parent process and its workers."""

    def __init__(
        self,
        module: str,
        root: Path,
        state: Path,
        *,
        workers: int = 2,
        env: Mapping[str, str] | None = None,
        addr: str = "127.0.0.1:0",
    ) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
        full_env.update(env or {})
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, "--transcripts", str(root), "--state", str(state),
             "--addr", addr, "--workers", str(workers)],
            env=full_env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._listening = LISTENING if workers > 1 else LISTENING_ALONE
        self.port = 0
        self.metrics_port = 0
        self._ready = threading.Event()
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        if not self._ready.wait(60) or not self.port:
            self.stop()
            raise AssertionError("the service did not start:\n" + "".join(self.lines[-30:]))

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            metrics = METRICS.search(line)
            if metrics:
                self.metrics_port = int(metrics.group(1))
            found = self._listening.search(line)
            if found:
                self.port = int(found.group(2))
                self._ready.set()
        self._ready.set()

    @property
    def addr(self) -> str:
        """HOST:PORT of the shared port."""
        return f"127.0.0.1:{self.port}"

    def worker_pids(self) -> set[int]:
        """The parent's live child processes (its workers), whichever of its threads started them."""
        pids: set[int] = set()
        for children in Path(f"/proc/{self.process.pid}/task").glob("*/children"):
            with contextlib.suppress(FileNotFoundError):
                pids.update(int(p) for p in children.read_text().split())
        return pids

    def wait(self, timeout: float) -> int:
        """Wait for the parent to exit by itself and for its last lines; its exit status."""
        status = self.process.wait(timeout)
        self._drainer.join(timeout)
        return status

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Signal the parent and wait; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def worker_of(call: Any) -> int:
    """The pid of the worker that served a finished call (from its trailing metadata)."""
    for key, value in call.trailing_metadata() or ():
        if key == WORKER_PID_KEY:
            return int(value)
    raise AssertionError("no worker pid in the trailing metadata")


def new_channel(addr: str) -> grpc.Channel:
    """A channel with a connection of its own (no subchannel shared with other channels)."""
    return grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)])


def channels_on_distinct_workers(
    addr: str, probe: Callable[[grpc.Channel], int], count: int = 2, attempts: int = 64
) -> list[tuple[grpc.Channel, int]]:
    """`count` channels, each served by a different worker (`probe` returns the pid)."""
    found: dict[int, grpc.Channel] = {}
    for _ in range(attempts):
        channel = new_channel(addr)
        pid = probe(channel)
        if pid in found or len(found) >= count:
            channel.close()
        else:
            found[pid] = channel
        if len(found) >= count:
            return [(c, p) for p, c in found.items()]
        time.sleep(0.01)
    raise AssertionError(f"connections reached only workers {sorted(found)}")
