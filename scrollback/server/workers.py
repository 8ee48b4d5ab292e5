"""Serving one service from several worker processes on one port (SO_REUSEPORT).

As grpc's own multiprocessing example does, a parent process reserves the
port with a socket bound with `SO_REUSEPORT` (port 0 becomes a real port
here, before any worker starts), then starts N workers, each a plain
`python -m <service>` whose grpc server binds the same port with the
`grpc.so_reuseport` option; the kernel spreads incoming connections over
them. The parent starts no grpc machinery of its own (grpc does not survive
a fork, so workers are fresh interpreters, or forks of a fork server that
only imported grpc: scrollback.server.forkserver, which `scrollback up`
uses), waits until every worker reports ready on a pipe, logs
`listening on HOST:PORT` and forwards SIGINT/SIGTERM.

Only the workers of one service share its port: before its workers start,
the parent claims the port (`claim_port`, an abstract unix socket named by
the port on Linux, released by the kernel when the parent dies), so a second
service started on a port in use fails at once with "the port is in use"
instead of silently taking half the connections (any process of the same
user may bind a port with `SO_REUSEPORT`). A service of one process binds
without `SO_REUSEPORT`, which the kernel refuses to share.

Once the service is up the parent supervises its workers: a worker that dies
is logged (its pid and exit status or signal) and replaced by a new one with
the same index, at once if it had served, after a doubling delay (1 s to
30 s) while replacements keep dying before they serve. A worker that exits
with status 2 (a configuration or listen error, its message on stderr) stops
the service with that status, as a worker failing during the first start does.

What the workers share lives in the state store (SQLite WAL or PostgreSQL)
or in the parent's run directory (`WorkerRole.run_dir`, removed on exit):

- `streams.table`: the calls in flight per principal (a memory-mapped table), so
  `SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` holds for the whole service, not per
  worker (scrollback.server.stream_limits); the parent forgets a dead worker's
  counts there before replacing it;
- `metrics/`: prometheus_client's multiprocess directory; the parent serves
  the metrics endpoint, summing every worker's counters.

`--workers N` / `SCROLLBACK_<SERVICE>_WORKERS` (default: the cores this
process may run on) chooses N; 1 serves in the one process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
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
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scrollback.server.forkserver import ForkServerError, describe_exit
from scrollback.server.listening import listening_at
from scrollback.server.stream_limits import SharedStreamCounter
from scrollback.server.worker_role import (
    COUNT_ENV,
    INDEX_ENV,
    PARENT_ENV,
    READY_FD_ENV,
    RUN_DIR_ENV,
    STREAMS_DB,
)

if TYPE_CHECKING:
    from scrollback.server.forkserver import ForkServer

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
MAX_WORKERS = 64
# The status a server gives a configuration or listen error (service_cli): not worth a retry.
FATAL_STATUS = 2
RESTART_DELAY_SECONDS = 1.0
MAX_RESTART_DELAY_SECONDS = 30.0
# How often the parent looks at its workers where it cannot wait on them (no pidfd).
POLL_SECONDS = 0.2


def default_workers() -> int:
    """The number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


class PortClaim:
    """A service's exclusive claim on a TCP port, whatever the host part; `close` gives it up.

    Linux: a unix socket bound to an abstract name made of the port, unique per
    network namespace (as the port is) and released by the kernel when its
    holder dies. Elsewhere: an flock on a file of the temporary directory.
    Raises OSError(EADDRINUSE) when another service holds the claim.
    """

    def __init__(self, port: int) -> None:
        self._handle: socket.socket | int
        if sys.platform.startswith("linux"):
            claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                claim.bind(f"\0scrollback-port-{port}")
            except BaseException:
                claim.close()
                raise
            self._handle = claim
            return
        path = Path(tempfile.gettempdir()) / f"scrollback-port-{port}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE)) from None
        self._handle = fd

    def close(self) -> None:
        """Give the port up."""
        if isinstance(self._handle, socket.socket):
            self._handle.close()
        elif self._handle >= 0:
            os.close(self._handle)
            self._handle = -1


def with_port(address: str, port: int) -> str:
    """`address` with its port replaced."""
    host, _, _ = address.rpartition(":")
    return f"{host}:{port}"


class WorkerProcess(Protocol):
    """What the supervisor uses of a worker: a `subprocess.Popen`, or a `ForkedWorker`."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


@dataclass
class _Workers:
    processes: list[WorkerProcess]
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

    def status(self, replaced: set[int] | frozenset[int] = frozenset()) -> int:
        """The service's exit status once its workers have ended (but the `replaced` pids).

        The first status a worker gave itself (e.g. 2, a configuration error);
        else 1 if one died of a signal the supervisor does not use to stop
        workers (a crash, or SIGKILL after the grace); else 0. SIGTERM/SIGINT
        deaths are clean stops: a worker still starting when the service is
        asked to stop has no handler yet and dies of the forwarded signal.
        """
        codes = [p.returncode for p in self.processes if p.pid not in replaced]
        for code in codes:
            if code is not None and code > 0:
                return code
        clean = (-signal.SIGTERM, -signal.SIGINT)
        return 1 if any(code and code not in clean for code in codes) else 0


def _pidfd(pid: int) -> int:
    """A descriptor that turns readable when `pid` exits; -1 where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


class Supervisor:
    """`count` workers of `python -m <name> argv` on one port, started and stopped as one.

    `metrics_env` is the service's metrics variable: workers get it empty (the
    parent serves the summed metrics on `metrics_addr` instead). Once started,
    a thread of the parent replaces workers that die; `wait` returns when the
    service has ended (stopped, or a fatal worker status). With a `forkserver`
    (scrollback.server.forkserver) the workers are forked from it instead of
    started as fresh interpreters; this process must then be a child subreaper.
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
        forkserver: ForkServer | None = None,
    ) -> None:
        self.name = name
        self._forkserver = forkserver
        self._argv = list(argv)
        self._address = address
        self.count = count
        self._metrics_addr = metrics_addr
        self._metrics_env = metrics_env
        self.port = 0
        self.metrics_port: int | None = None
        self.workers = _Workers([])
        self._reserved: socket.socket | None = None
        self._claim: PortClaim | None = None
        self._run_dir: Path | None = None
        self._env: dict[str, str] = {}
        self._worker_argv: list[str] = []
        self._ready_pipe = (-1, -1)
        self._wake_pipe = (-1, -1)
        self._counter: SharedStreamCounter | None = None
        # Guards the worker list and `_stopping` between the supervising thread and stop/signal;
        # reentrant because a signal handler may run while this thread holds it.
        self._lock = threading.RLock()
        self._stopping = False
        self._fatal = 0
        # Workers whose death was logged and whose replacement is (or was to be)
        # started: not a failure of the service when it stops.
        self._replaced: set[int] = set()
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Claim the port and start the workers; True once all serve.

        False when one exited first (its own message is on stderr) or none
        came up in time; the others are stopped then. Raises OSError when
        the port cannot be reserved or another service holds it.
        """
        self._reserved, self.port = reserve_port(self._address)
        try:
            self._claim = PortClaim(self.port)
        except OSError:
            self._reserved.close()
            self._reserved = None
            raise
        self._run_dir = Path(tempfile.mkdtemp(prefix=f"scrollback-{self.name}-"))
        metrics_dir = self._run_dir / "metrics"
        metrics_dir.mkdir()
        # The shared stream counter's table is made here, once, before any worker maps it.
        self._counter = SharedStreamCounter(self._run_dir / STREAMS_DB, workers=self.count)
        self._env = dict(os.environ)
        self._env.update(
            {
                RUN_DIR_ENV: str(self._run_dir),
                COUNT_ENV: str(self.count),
                PARENT_ENV: str(os.getpid()),
            }
        )
        self._env[MULTIPROC_ENV] = str(metrics_dir)
        if self._metrics_env:
            self._env[self._metrics_env] = ""
        self._worker_argv = [
            sys.executable, "-m", self.name, *self._argv,
            "--addr", with_port(self._address, self.port), "--workers", "1",
        ]  # fmt: skip
        # Both pipes live as long as the service: replacements announce
        # themselves on the same ready pipe, and stop() wakes the supervising thread.
        self._ready_pipe = os.pipe()
        self._wake_pipe = os.pipe()
        try:
            with self._lock:
                for index in range(self.count):
                    self.workers.processes.append(self._spawn(index))
        except BaseException:
            self.stop()  # the workers started so far, the port and the run directory
            raise
        ready = _wait_ready(self.name, self._ready_pipe[0], self.workers, self.count)
        if not ready:
            self.stop()
            return False
        if self._metrics_addr:
            from scrollback.server.metrics import serve_summed_metrics

            self.metrics_port = serve_summed_metrics(self._metrics_addr, metrics_dir)
            log.info("%s: metrics on port %d", self.name, self.metrics_port)
        self._thread = threading.Thread(
            target=self._supervise, name=f"{self.name}-workers", daemon=True
        )
        self._thread.start()
        log.info(
            "%s: %d workers listening on %s",
            self.name,
            self.count,
            listening_at(self._address, self.port),
        )
        return True

    def _spawn(self, index: int) -> WorkerProcess:
        """Start worker `index` (the lock held)."""
        env = {
            **self._env,
            INDEX_ENV: str(index),
            READY_FD_ENV: str(self._ready_pipe[1]),
        }
        if self._forkserver is not None:
            # The fork server runs `<name>.__main__.main` with the flags after `-m <name>`.
            try:
                return self._forkserver.spawn(
                    self.name, self._worker_argv[3:], env, self._ready_pipe[1]
                )
            except ForkServerError as error:
                # Serving on matters more than the shared pages: a fresh interpreter instead.
                log.warning(
                    "%s: %s; starting worker %d as a fresh interpreter", self.name, error, index
                )
        # Their own process group: a terminal's Ctrl-C reaches the parent
        # only, which forwards it once.
        return subprocess.Popen(
            self._worker_argv, env=env, pass_fds=(self._ready_pipe[1],), process_group=0
        )

    def _supervise(self) -> None:
        """Replace workers that die until the service stops (the supervising thread)."""
        served = {p.pid for p in self.workers.processes}  # pids that announced themselves
        restart_at: dict[int, float] = {}  # index -> when its replacement starts
        failures = 0  # replacements in a row that died before serving
        pidfds = {p.pid: _pidfd(p.pid) for p in self.workers.processes}
        buffer = b""
        try:
            while True:
                with self._lock:
                    processes = list(self.workers.processes)
                    stopping = self._stopping
                if stopping and all(p.poll() is not None for p in processes):
                    return
                waits = [self._ready_pipe[0], self._wake_pipe[0]]
                waits += [fd for pid, fd in pidfds.items() if fd >= 0]
                timeout: float | None = None
                if restart_at and not stopping:
                    timeout = max(0.0, min(restart_at.values()) - time.monotonic())
                if any(fd < 0 for fd in pidfds.values()):
                    timeout = POLL_SECONDS if timeout is None else min(timeout, POLL_SECONDS)
                readable, _, _ = select.select(waits, [], [], timeout)
                if self._ready_pipe[0] in readable:
                    buffer += os.read(self._ready_pipe[0], 4096)
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        served.add(int(line))
                        failures = 0
                        log.info("%s: worker %s serving", self.name, line.decode())
                if self._wake_pipe[0] in readable:
                    os.read(self._wake_pipe[0], 4096)
                for index, process in enumerate(processes):
                    code = process.poll()
                    if code is None or process.pid not in pidfds:
                        continue
                    fd = pidfds.pop(process.pid)
                    if fd >= 0:
                        os.close(fd)
                    with self._lock:
                        stopping = self._stopping
                    if stopping:
                        continue
                    self._forget(index, process.pid)
                    if code == FATAL_STATUS:
                        log.error(
                            "%s: worker %d %s; stopping the service",
                            self.name, process.pid, describe_exit(code),
                        )  # fmt: skip
                        self._fatal = code
                        self._begin_stop()
                        continue
                    delay = 0.0
                    if process.pid not in served:
                        failures += 1
                        delay = min(
                            RESTART_DELAY_SECONDS * 2 ** (failures - 1), MAX_RESTART_DELAY_SECONDS
                        )
                    log.warning(
                        "%s: worker %d %s; starting another%s",
                        self.name, process.pid, describe_exit(code),
                        f" in {delay:g} s" if delay else "",
                    )  # fmt: skip
                    self._replaced.add(process.pid)
                    restart_at[index] = time.monotonic() + delay
                self._restart_due(restart_at, pidfds)
        except Exception:
            # The service cannot be kept whole any more: end it rather than serve short.
            log.exception("%s: supervising the workers failed; stopping the service", self.name)
            self._fatal = self._fatal or 1
            self._begin_stop()
        finally:
            for fd in pidfds.values():
                if fd >= 0:
                    os.close(fd)
            self._ended.set()

    def _restart_due(self, restart_at: dict[int, float], pidfds: dict[int, int]) -> None:
        """Start the replacements whose delay has passed (the supervising thread)."""
        now = time.monotonic()
        for index, when in list(restart_at.items()):
            if when > now:
                continue
            del restart_at[index]
            with self._lock:
                if self._stopping:
                    continue
                replacement = self._spawn(index)
                self.workers.processes[index] = replacement
            pidfds[replacement.pid] = _pidfd(replacement.pid)

    def _forget(self, index: int, pid: int) -> None:
        """What a dead worker left in the shared state: its stream counts, its live gauges."""
        if self._counter is not None:
            self._counter.forget_worker(index)
        if self._run_dir is not None and self._metrics_addr:
            from prometheus_client.multiprocess import mark_process_dead

            mark_process_dead(pid, str(self._run_dir / "metrics"))  # type: ignore[no-untyped-call]

    def _begin_stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop replacing workers and forward `sig` to each (once)."""
        with self._lock:
            self._stopping = True
            self.workers.signal_all(sig)
        if self._wake_pipe[1] >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_pipe[1], b"x")

    def signal(self, sig: int) -> None:
        """Forward a signal to every worker (once each); the service is stopping."""
        self._begin_stop(sig)

    def wait(self) -> None:
        """Return when the service has ended: every worker stopped, or a fatal worker status."""
        if self._thread is not None:
            self._ended.wait()

    def stop(self) -> int:
        """Stop every worker (SIGTERM, then SIGKILL after a grace), release all; the status."""
        self._begin_stop()
        with self._lock:
            workers = _Workers(list(self.workers.processes), self.workers.signalled)
        workers.wait_all(STOP_TIMEOUT_SECONDS)
        workers.signal_all(signal.SIGKILL)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        for end in (*self._ready_pipe, *self._wake_pipe):
            if end >= 0:
                os.close(end)
        self._ready_pipe = self._wake_pipe = (-1, -1)
        if self._counter is not None:
            self._counter.close()
            self._counter = None
        if self._claim is not None:
            self._claim.close()
            self._claim = None
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        return self._fatal or self.workers.status(self._replaced)


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

    Returns when the service has ended: 0 after a signal its workers obeyed;
    a worker's fatal status (2) stops the others and gives the status.
    Raises OSError when the port cannot be reserved or is another service's.
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
            return 0 if stop_requested else (supervisor.workers.status() or FATAL_STATUS)
        supervisor.wait()
        return supervisor.stop()
    finally:
        supervisor.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_ready(name: str, read_end: int, workers: _Workers, count: int) -> bool:
    """True when every worker announced itself; False when one exited first or time ran out.

    A False is always logged with its cause (which worker ended and how, or the
    time that ran out): a start either serves or says why.
    """
    ready = 0
    buffer = b""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while ready < count and time.monotonic() < deadline:
        ended = [(p.pid, code) for p in workers.processes if (code := p.poll()) is not None]
        if ended:
            for pid, code in ended:
                log.error("%s: worker %d %s before it served", name, pid, describe_exit(code))
            return False
        try:
            readable, _, _ = select.select([read_end], [], [], 0.1)
        except InterruptedError:  # a signal: the loop checks the workers again
            continue
        if readable:
            chunk = os.read(read_end, 4096)
            if not chunk:
                log.error("%s: the workers' ready pipe closed", name)
                return False
            buffer += chunk
            ready = buffer.count(b"\n")
    if ready < count:
        log.error(
            "%s: %d of %d workers did not report ready within %g s",
            name, count - ready, count, READY_TIMEOUT_SECONDS,
        )  # fmt: skip
        return False
    return True
