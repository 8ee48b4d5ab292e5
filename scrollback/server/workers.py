"""Serving one service from several worker processes on one port (SO_REUSEPORT).

As grpc's own multiprocessing example does, a parent process reserves the
port with a socket bound with `SO_REUSEPORT` (port 0 becomes a real port
here, before any worker starts), then starts N workers, each a plain
`python -m <service>` whose grpc server binds the same port with the
`grpc.so_reuseport` option; the kernel spreads incoming connections over
them. The parent starts no grpc machinery of its own (grpc does not survive
a fork, so workers are fresh interpreters), waits until every worker
reports ready on a pipe, logs `listening on HOST:PORT`, forwards SIGINT/SIGTERM
and exits when the workers have exited (with the first failure's status; a
worker that dies takes the others down, for the supervisor above to restart
the whole service on a clean slate).

What the workers share lives in the state store (SQLite WAL or PostgreSQL)
or in the parent's run directory (`WorkerRole.run_dir`, removed on exit):

- `streams.table`: the calls in flight per principal (a memory-mapped table), so
  `SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` holds for the whole service, not per
  worker (scrollback.server.stream_limits);
- `metrics/`: prometheus_client's multiprocess directory; the parent serves
  the metrics endpoint, summing every worker's counters.

`--workers N` / `SCROLLBACK_<SERVICE>_WORKERS` (default: the cores this
process may run on) chooses N; 1 serves in the one process, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from scrollback.server.listening import listening_at
from scrollback.server.stream_limits import SharedStreamCounter

log = logging.getLogger(__name__)

RUN_DIR_ENV = "SCROLLBACK_WORKER_RUN_DIR"
READY_FD_ENV = "SCROLLBACK_WORKER_READY_FD"
COUNT_ENV = "SCROLLBACK_WORKER_COUNT"
PARENT_ENV = "SCROLLBACK_WORKER_PARENT"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STREAMS_DB = "streams.table"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
PARENT_CHECK_SECONDS = 0.5
MAX_WORKERS = 64


def default_workers() -> int:
    """The number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """This process is one of `count` workers started by a parent (`run_dir` is shared)."""

    run_dir: Path
    count: int
    ready_fd: int
    parent: int = 0

    @property
    def streams_db(self) -> Path:
        """The shared count of calls in flight per principal."""
        return self.run_dir / STREAMS_DB

    def announce_ready(self) -> None:
        """Tell the parent this worker serves (its pid on the ready pipe); follow it out.

        A parent killed outright (SIGKILL) cannot forward anything, so each
        worker also watches for being orphaned and then stops as on SIGTERM.
        """
        # The pid the parent gave, not getppid() now: a parent killed while
        # this worker was starting has already left it to init.
        parent = self.parent or os.getppid()

        def follow_parent() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_CHECK_SECONDS)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=follow_parent, name="scrollback-parent", daemon=True).start()
        if self.ready_fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self.ready_fd, f"{os.getpid()}\n".encode())
            os.close(self.ready_fd)


@cache
def current_role() -> WorkerRole | None:
    """The role the parent gave this process, or None when it serves alone."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return None
    return WorkerRole(
        Path(run_dir),
        int(os.environ.get(COUNT_ENV, "1")),
        int(os.environ.get(READY_FD_ENV, "-1")),
        int(os.environ.get(PARENT_ENV, "0")),
    )


def can_share_port(address: str) -> bool:
    """TCP addresses can be shared by workers; unix sockets cannot."""
    return not address.startswith("unix:") and ":" in address


def reserve_port(address: str) -> tuple[socket.socket, int]:
    """Bind HOST:PORT with SO_REUSEPORT (port 0 picks one); the socket and its port.

    The socket stays bound (never listening, so it takes no connections)
    while the workers run, so the port stays ours. Raises OSError.
    """
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM)
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock, int(sock.getsockname()[1])


def with_port(address: str, port: int) -> str:
    """`address` with its port replaced."""
    host, _, _ = address.rpartition(":")
    return f"{host}:{port}"


def _serve_metrics(metrics_addr: str, directory: Path) -> int:
    """The parent's metrics endpoint: every worker's metrics, summed; the bound port."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    host, _, port_text = metrics_addr.rpartition(":")
    server, _thread = start_http_server(
        int(port_text), addr=host.strip("[]") or "127.0.0.1", registry=registry
    )
    return int(server.server_port)


@dataclass
class _Workers:
    processes: list[subprocess.Popen[bytes]]
    # Pids already told to stop: a second SIGTERM would find a worker whose
    # graceful stop has put the default handler back, and kill it.
    signalled: set[int] = field(default_factory=set)

    def signal_all(self, sig: int) -> None:
        for process in self.processes:
            if sig != signal.SIGKILL:
                if process.pid in self.signalled:
                    continue
                self.signalled.add(process.pid)
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    def wait_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def status(self) -> int:
        """The service's exit status once its workers have ended.

        The first status a worker gave itself (e.g. 2, a configuration error);
        else 1 if one died of a signal the supervisor does not use to stop
        workers (a crash, or SIGKILL after the grace); else 0. SIGTERM/SIGINT
        deaths are clean stops: a worker still starting when the service is
        asked to stop has no handler yet and dies of the forwarded signal.
        """
        codes = [process.returncode for process in self.processes]
        for code in codes:
            if code is not None and code > 0:
                return code
        clean = (-signal.SIGTERM, -signal.SIGINT)
        return 1 if any(code and code not in clean for code in codes) else 0


class Supervisor:
    """`count` workers of `python -m <name> argv` on one port, started and stopped as one.

    `metrics_env` is the service's metrics variable: workers get it empty (the
    parent serves the summed metrics on `metrics_addr` instead).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        address: str,
        count: int,
        metrics_addr: str = "",
        metrics_env: str = "",
    ) -> None:
        self.name = name
        self._argv = list(argv)
        self._address = address
        self.count = count
        self._metrics_addr = metrics_addr
        self._metrics_env = metrics_env
        self.port = 0
        self.metrics_port: int | None = None
        self.workers = _Workers([])
        self._reserved: socket.socket | None = None
        self._run_dir: Path | None = None

    def start(self) -> bool:
        """Reserve the port and start the workers; True once all serve.

        False when one exited first (its own message is on stderr) or none
        came up in time; the others are stopped then. Raises OSError when
        the port cannot be reserved.
        """
        self._reserved, self.port = reserve_port(self._address)
        self._run_dir = Path(tempfile.mkdtemp(prefix=f"scrollback-{self.name}-"))
        metrics_dir = self._run_dir / "metrics"
        metrics_dir.mkdir()
        # The shared stream counter's table is made here, once, before any worker maps it.

        SharedStreamCounter(self._run_dir / STREAMS_DB).close()
        env = dict(os.environ)
        env.update(
            {
                RUN_DIR_ENV: str(self._run_dir),
                COUNT_ENV: str(self.count),
                PARENT_ENV: str(os.getpid()),
            }
        )
        env[MULTIPROC_ENV] = str(metrics_dir)
        if self._metrics_env:
            env[self._metrics_env] = ""
        worker_argv = [
            sys.executable, "-m", self.name, *self._argv,
            "--addr", with_port(self._address, self.port), "--workers", "1",
        ]  # fmt: skip
        read_end, write_end = os.pipe()
        try:
            env[READY_FD_ENV] = str(write_end)
            for _ in range(self.count):
                # Their own process group: a terminal's Ctrl-C reaches the
                # parent only, which forwards it once.
                self.workers.processes.append(
                    subprocess.Popen(worker_argv, env=env, pass_fds=(write_end,), process_group=0)
                )
            os.close(write_end)
            write_end = -1
            ready = _wait_ready(read_end, self.workers, self.count)
        finally:
            if write_end >= 0:
                os.close(write_end)
            os.close(read_end)
        if not ready:
            self.stop()
            return False
        if self._metrics_addr:
            self.metrics_port = _serve_metrics(self._metrics_addr, metrics_dir)
            log.info("%s: metrics on port %d", self.name, self.metrics_port)
        log.info(
            "%s: %d workers listening on %s",
            self.name,
            self.count,
            listening_at(self._address, self.port),
        )
        return True

    def signal(self, sig: int) -> None:
        """Forward a signal to every worker (once each)."""
        self.workers.signal_all(sig)

    def stop(self) -> int:
        """Stop every worker (SIGTERM, then SIGKILL after a grace), release all; the status."""
        self.workers.signal_all(signal.SIGTERM)
        self.workers.wait_all(STOP_TIMEOUT_SECONDS)
        self.workers.signal_all(signal.SIGKILL)
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        return self.workers.status()


def supervise(
    name: str,
    argv: Sequence[str],
    *,
    address: str,
    count: int,
    metrics_addr: str,
    metrics_env: str,
) -> int:
    """Run a `Supervisor` in the foreground: forward SIGINT/SIGTERM; its exit status.

    Returns when the workers have exited: 0 after a signal they obeyed; a
    worker that ended on its own stops the others and gives the status.
    Raises OSError when the port cannot be reserved.
    """
    supervisor = Supervisor(
        name,
        argv,
        address=address,
        count=count,
        metrics_addr=metrics_addr,
        metrics_env=metrics_env,
    )
    stop_requested: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        stop_requested.append(sig)
        supervisor.signal(sig)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not supervisor.start():
            return 0 if stop_requested else (supervisor.workers.status() or 2)
        _wait_any_exit(supervisor.workers)
        # One worker ended (a signal we forwarded, or a failure): end the others.
        return supervisor.stop()
    finally:
        supervisor.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_ready(read_end: int, workers: _Workers, count: int) -> bool:
    """True when every worker announced itself; False when one exited first or time ran out."""
    ready = 0
    buffer = b""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while ready < count and time.monotonic() < deadline:
        if any(p.poll() is not None for p in workers.processes):
            return False
        try:
            readable, _, _ = select.select([read_end], [], [], 0.1)
        except InterruptedError:  # a signal: the loop checks the workers again
            continue
        if readable:
            chunk = os.read(read_end, 4096)
            if not chunk:
                return False
            buffer += chunk
            ready = buffer.count(b"\n")
    return ready >= count


def _wait_any_exit(workers: _Workers) -> None:
    """Return when any worker has exited."""
    while all(p.poll() is None for p in workers.processes):
        with contextlib.suppress(ChildProcessError, InterruptedError):
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
