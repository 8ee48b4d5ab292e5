"""Workers forked from one process that has already imported the services (a fork server).

A worker started as a fresh `python -m <service>` imports grpc, protobuf,
asyncio and the service's modules itself, and keeps its own copy of them:
code objects, module dictionaries and the libraries' relocated data, most
of a worker's memory at idle. `scrollback up` instead starts one
`ForkServer`: a fresh interpreter that imports every module its workers
serve from (the garbage collector off meanwhile, so no collection leaves
holes among the kept objects for a worker's allocations to fill), freezes
them out of the collector's reach (`gc.freeze`, so a collection in a worker
does not write to, and so copy, every page holding an object) and forks a
worker per request; the worker turns its collector back on. The workers share those
pages copy-on-write, and each service's workers and the other service's
share what both import.

The fork server never starts a thread, an event loop or anything of grpc
but its import (grpc cannot be forked once it runs), so every fork is of a
one-threaded process. Only its modules' import-time state is inherited:
prometheus_client picks its multiprocess values at import when
`PROMETHEUS_MULTIPROC_DIR` is set, so the fork server sets it to a directory
of its own (the workers reopen their files in their service's directory at
their first count, as after any fork).

The caller's process must be a child subreaper (`become_subreaper`): the
fork server forks an intermediate child that forks the worker and exits,
so the worker is re-parented to the caller, which waits on it as on any
child (`ForkedWorker`, the subset of `subprocess.Popen` the supervisor
uses) and whose death the worker follows (scrollback.server.workers). A
forked worker runs nothing before it is the caller's child (its intermediate
parent has exited), so it never sees a parent other than the caller's.
The fork server ends when its caller closes the control socket or dies.

A fork server that ends while it is still wanted (killed, or taken by the OOM
killer) is replaced at the next `spawn`: the caller logs its end and starts
another, so the service goes on forking replacements for its workers.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
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
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_FD_ENV = "SCROLLBACK_WORKER_READY_FD"
START_TIMEOUT_SECONDS = 60.0
MAX_MESSAGE = 1 << 20
# Linux's prctl option that makes orphaned descendants this process's children.
PR_SET_CHILD_SUBREAPER = 36
# How often a wait without a pidfd looks again.
POLL_SECONDS = 0.05
# How long a forked worker waits for its intermediate parent to have exited.
REPARENT_TIMEOUT_SECONDS = 10.0


# The status of a worker that ended where this process could not wait for it.
LOST_STATUS = 255


def _exists(pid: int) -> bool:
    """True if a process `pid` runs (or is a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe_exit(code: int) -> str:
    """A process's end in words: its exit status or the signal that killed it."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class ForkedWorker:
    """A worker the fork server forked, re-parented to this process: waited on as a child."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def _reap(self, flags: int) -> int | None:
        """waitpid under the lock (another thread may be waiting: then None)."""
        if self.returncode is not None:
            return self.returncode
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self.returncode is not None:
                return self.returncode
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:
                # Not this process's child: running (by its pid) or ended with its status
                # lost, which is no clean exit.
                if _exists(self.pid):
                    return None
                log.warning("worker %d ended where it could not be waited for", self.pid)
                self.returncode = LOST_STATUS
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        """The exit status if the worker has ended, else None."""
        return self._reap(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker's end; subprocess.TimeoutExpired after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pidfd = -1
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(self.pid)
        try:
            while (code := self.poll()) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
                if pidfd >= 0:
                    select.select([pidfd], [], [], left)
                else:
                    time.sleep(POLL_SECONDS if left is None else min(left, POLL_SECONDS))
            return code
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def send_signal(self, sig: int) -> None:
        """Signal the worker unless it has been waited for already."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


class ForkServerError(RuntimeError):
    """The fork server did not start, ended, or could not fork a worker."""


class ForkServer:
    """A process that imported `modules` and forks workers of them (`spawn`); `close` ends it.

    `spawn` may be called from several threads. Its caller must be a child
    subreaper (`become_subreaper`) for the workers to be its children. A fork
    server found ended at a `spawn` is logged and replaced by another.
    """

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = list(modules)
        self._control: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False
        # Fork servers started after the first (one that ended while wanted is replaced).
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The fork server's process id (None when closed)."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the fork server and wait until it has imported its modules.

        Raises ForkServerError when it exits or does not get ready in time.
        """
        with self._lock:
            self._launch()

    def _launch(self) -> None:
        """Start a fork server process (the lock held); ForkServerError when it does not start."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), *self.modules],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
        finally:
            theirs.close()
        self._control = ours
        ready, _, _ = select.select([ours], [], [], START_TIMEOUT_SECONDS)
        try:
            started = bool(ready) and ours.recv(MAX_MESSAGE) == b"ready"
        except OSError:
            started = False
        if not started:
            self._end()
            raise ForkServerError("the fork server did not start")

    def _end(self) -> int | None:
        """Close the control socket and wait for the process (the lock held); its status."""
        if self._control is not None:
            self._control.close()
            self._control = None
        process, self._process = self._process, None
        if process is None:
            return None
        try:
            return process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def _ask(self, request: bytes, ready_fd: int) -> bytes:
        """Send one fork request and read the answer (the lock held); b"" when it has ended."""
        if self._control is None:
            return b""
        try:
            socket.send_fds(self._control, [request], [ready_fd])
            return self._control.recv(MAX_MESSAGE)
        except OSError:
            return b""

    def spawn(
        self, module: str, argv: Sequence[str], env: Mapping[str, str], ready_fd: int
    ) -> ForkedWorker:
        """Fork a worker that runs `<module>.__main__.main(argv)` under `env`.

        `ready_fd` is passed to it (as SCROLLBACK_WORKER_READY_FD). A fork
        server that has ended is replaced first (logged). Raises ForkServerError
        when it is closed, cannot be replaced or could not fork.
        """
        request = json.dumps({"module": module, "argv": list(argv), "env": dict(env)}).encode()
        with self._lock:
            if self._closed:
                raise ForkServerError("the fork server is closed")
            reply = self._ask(request, ready_fd)
            if not reply:
                # Killed or taken by the OOM killer (or not started again since): the service
                # still needs its workers forked.
                code = self._end()
                how = "is not running" if code is None else describe_exit(code)
                log.warning("the fork server %s; starting another", how)
                self._launch()
                self.restarts += 1
                log.info("the fork server was started again (pid %d)", self.pid or 0)
                reply = self._ask(request, ready_fd)
        if not reply:
            raise ForkServerError("the fork server ended")
        answer: dict[str, Any] = json.loads(reply)
        if "pid" not in answer:
            raise ForkServerError(f"the fork server could not fork: {answer.get('error', '')}")
        return ForkedWorker(int(answer["pid"]))

    def close(self) -> None:
        """End the fork server for good (its workers are not affected)."""
        with self._lock:
            self._closed = True
            self._end()


def _become_worker(request: dict[str, Any], ready_fd: int, intermediate: int) -> None:
    """In the forked worker: take its environment and run its service; never returns."""
    code: int = 1
    gc.enable()  # off in the fork server only (`main`)
    try:
        # Its intermediate parent may still be exiting: until it has, this process is not the
        # caller's child, which could neither wait for it nor be followed by it.
        deadline = time.monotonic() + REPARENT_TIMEOUT_SECONDS
        while os.getppid() == intermediate and time.monotonic() < deadline:
            time.sleep(0.001)
        os.setpgid(0, 0)  # its own process group, as the supervisor's other workers
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[READY_FD_ENV] = str(ready_fd)
        argv = [str(arg) for arg in request["argv"]]
        sys.argv = [request["module"], *argv]
        main = importlib.import_module(f"{request['module']}.__main__").main
        code = int(main(argv) or 0)
    except SystemExit as error:
        code = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            import logging

            logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _fork(request: dict[str, Any], ready_fd: int, control: socket.socket) -> int:
    """Fork a worker through an intermediate child that exits at once; the worker's pid."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            control.close()
            os.close(read_end)
            intermediate = os.getpid()
            worker = os.fork()
            if worker == 0:
                os.close(write_end)
                _become_worker(request, ready_fd, intermediate)
            os.write(write_end, worker.to_bytes(8, "little"))
        finally:
            os._exit(0)
    os.close(write_end)
    data = os.read(read_end, 8)
    os.close(read_end)
    os.waitpid(middle, 0)
    if len(data) != 8:
        raise OSError("the worker was not forked")
    return int.from_bytes(data, "little")


def main(argv: Sequence[str]) -> int:
    """`python -m scrollback.server.forkserver FD MODULE...`: import, then fork on request."""
    control = socket.socket(fileno=int(argv[0]))
    # Ctrl-C and SIGTERM are for the supervisor to forward to the workers; this process
    # ends when its control socket closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    metrics = tempfile.mkdtemp(prefix="scrollback-forkserver-")
    os.environ[MULTIPROC_ENV] = metrics
    # No collection while importing: one would free objects between the ones kept and
    # leave holes that a worker's first allocations fill, writing to (and so copying)
    # pages it would otherwise share.
    gc.disable()
    try:
        for module in argv[1:]:
            importlib.import_module(module)
        gc.freeze()
        control.send(b"ready")
        while True:
            message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 1)
            if not message:
                return 0
            try:
                if len(fds) != 1:
                    raise OSError("no ready descriptor")
                pid = _fork(json.loads(message), fds[0], control)
                control.send(json.dumps({"pid": pid}).encode())
            except OSError as error:
                control.send(json.dumps({"error": error.strerror or str(error)}).encode())
            finally:
                for fd in fds:
                    os.close(fd)
    except (ConnectionError, OSError):
        return 0
    finally:
        shutil.rmtree(metrics, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
