"""`scrollback up`'s fork server and starts, over real process trees.

The fork server is killed, then a worker: `up` logs the fork server's end, starts another,
forks the replacement from it and keeps serving. `up` started and stopped many times in a row
on the same ports serves every time (or says why); a start whose worker dies before serving
names the worker and its end; a worker the parent cannot wait for is never a clean exit.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback.server.forkserver import LOST_STATUS, ForkedWorker, ForkServer
from scrollback.server.workers import Supervisor
from tests.support.servers import user_line
from tests.support.workers import channels_on_distinct_workers, new_channel, worker_of

SESSION = "0b7e1c2a-5d4f-4b8e-9a61-3f2d1c0b9a87"
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
SERVING = re.compile(r"history on \S+:(\d+), media on \S+:(\d+)")
FORKSERVER_IMAGE = b"scrollback.server.forkserver"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root, state = tmp_path / "root", tmp_path / "state"
    (root / "proj").mkdir(parents=True)
    state.mkdir()
    (root / "proj" / f"{SESSION}.jsonl").write_bytes(user_line("u-1", "hello"))
    return root, state


def _up(
    root: Path, state: Path, log: Path, history: str = "127.0.0.1:0", media: str = "127.0.0.1:0"
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    with log.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "scrollback_app.cli", "up", "--workers", "2",
             "--transcripts", str(root), "--state", str(state),
             "--history-addr", history, "--media-addr", media],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )  # fmt: skip


def _history_pid(channel: grpc.Channel) -> int:
    stub = history_pb2_grpc.HistoryServiceStub(channel)
    _, call = stub.ListSessions.with_call(history_pb2.ListSessionsRequest(), timeout=10)
    return worker_of(call)


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(child) for child in (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return found


def _image(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_up_replaces_a_killed_fork_server_and_keeps_replacing_workers(tmp_path: Path) -> None:
    root, state = _tree(tmp_path)
    log = tmp_path / "up.log"
    process = _up(root, state, log)
    try:
        assert process.stdout is not None
        found = SERVING.search(process.stdout.readline())
        assert found, log.read_text()
        history_addr = f"127.0.0.1:{found.group(1)}"
        (kept, kept_pid), (_, victim) = channels_on_distinct_workers(history_addr, _history_pid)
        (forkserver,) = _forkservers(process.pid)
        os.kill(forkserver, signal.SIGKILL)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while True:
            text = log.read_text()
            serving = {int(p) for p in re.findall(r"history_service: worker (\d+) serving", text)}
            replacements = serving - {kept_pid, victim}
            if replacements and process.poll() is None:
                break
            assert process.poll() is None, text[-3000:]
            assert time.monotonic() < deadline, "no replacement came up:\n" + text[-3000:]
            time.sleep(0.05)
        assert "the fork server was killed by SIGKILL; starting another" in text
        assert f"worker {victim} was killed by SIGKILL; starting another" in text
        (replacement,) = replacements
        # Forked from the new fork server (its image), a child of `up`, and serving.
        assert FORKSERVER_IMAGE in _image(replacement)
        assert replacement in _children(process.pid)
        (new_server,) = _forkservers(process.pid)
        assert new_server != forkserver
        assert _history_pid(kept) == kept_pid
        reached = {p for _, p in channels_on_distinct_workers(history_addr, _history_pid)}
        assert reached == {kept_pid, replacement}
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        _stop(process)


def _forkservers(pid: int) -> set[int]:
    """The fork servers among `pid`'s children: its image, and one thread (a worker runs grpc's)."""
    found = set()
    for child in _children(pid):
        try:
            threads = len(list(Path(f"/proc/{child}/task").iterdir()))
        except FileNotFoundError:
            continue
        if FORKSERVER_IMAGE in _image(child) and threads == 1:
            found.add(child)
    return found


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports (all held while they are picked)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def test_up_started_many_times_in_a_row_serves_or_says_why_every_time(tmp_path: Path) -> None:
    root, state = _tree(tmp_path)
    history, media = (f"127.0.0.1:{port}" for port in _free_ports(2))
    for attempt in range(12):
        log = tmp_path / f"up-{attempt}.log"
        process = _up(root, state, log, history, media)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not SERVING.search(line):
                process.wait(60)
                text = log.read_text()
                # Another program may take a port between two starts (it is free when picked):
                # that start says so; any other failure is one.
                assert "the port is in use" in text, f"start {attempt} failed:\n{text[-3000:]}"
                continue
            with new_channel(history) as channel:
                assert _history_pid(channel) > 0
        finally:
            _stop(process)
        assert process.returncode == 0, log.read_text()[-3000:]


# A worker that dies at start before it serves, as one the OOM killer takes would.
DYING_WORKER = """
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_start_that_fails_says_which_worker_ended_and_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "dying_worker.py").write_text(DYING_WORKER)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    caplog.set_level(logging.INFO, logger="scrollback.server.workers")
    supervisor = Supervisor("dying_worker", [], address="127.0.0.1:0", count=2)
    try:
        assert not supervisor.start()
    finally:
        supervisor.stop()
    ended = re.findall(
        r"dying_worker: worker (\d+) was killed by SIGKILL before it served", caplog.text
    )
    assert ended, caplog.text


def test_a_worker_this_process_cannot_wait_for_is_not_taken_for_a_clean_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pid that is not this process's child: running while it exists (the parent of this
    test runs), and once gone an end whose status is lost, never status 0."""
    assert ForkedWorker(os.getppid()).poll() is None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped here: the pid no longer exists
    worker = ForkedWorker(gone.pid)
    assert worker.poll() == LOST_STATUS != 0
    assert f"worker {gone.pid} ended where it could not be waited for" in caplog.text


# A worker that serves nothing: it says it is ready and waits to be stopped.
READY_WORKER = """
import os, signal
os.write(int(os.environ["SCROLLBACK_WORKER_READY_FD"]), f"{os.getpid()}\\n".encode())
signal.pause()
"""


def test_a_worker_starts_as_a_fresh_interpreter_when_no_fork_server_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "ready_worker.py").write_text(READY_WORKER)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    caplog.set_level(logging.INFO)
    forkserver = ForkServer(["json"])
    forkserver.start()
    first = forkserver.pid
    assert first is not None
    # The next fork server cannot start (a module it cannot import); the first is killed.
    forkserver.modules = ["scrollback_no_such_module"]
    os.kill(first, signal.SIGKILL)
    supervisor = Supervisor(
        "ready_worker", [], address="127.0.0.1:0", count=1, forkserver=forkserver
    )
    try:
        assert supervisor.start()
        (worker,) = supervisor.workers.processes
        assert isinstance(worker, subprocess.Popen) and worker.poll() is None
    finally:
        assert supervisor.stop() == 0
        forkserver.close()
    assert "the fork server was killed by SIGKILL; starting another" in caplog.text
    assert (
        "ready_worker: the fork server did not start; starting worker 0 as a fresh" in caplog.text
    )


def test_up_itself_loads_neither_grpc_nor_protobuf(tmp_path: Path) -> None:
    # `up` only supervises its workers: grpc's and protobuf's libraries would stay in
    # its memory for as long as it runs, beside the workers' shared copy.
    root, state = _tree(tmp_path)
    log = tmp_path / "up.log"
    process = _up(root, state, log)
    try:
        assert process.stdout is not None
        assert SERVING.search(process.stdout.readline()), log.read_text()
        mapped = Path(f"/proc/{process.pid}/maps").read_text()
        assert "cygrpc" not in mapped
        assert "_upb" not in mapped
    finally:
        _stop(process)


# A worker that writes whether its garbage collector runs, and how many objects it
# inherited frozen, to the file its argv names.
GC_WORKER = """
import gc, pathlib


def main(argv):
    pathlib.Path(argv[0]).write_text(f"{gc.isenabled()} {gc.get_freeze_count()}")
    return 0
"""


def test_a_forked_worker_collects_garbage_and_shares_its_parents_objects_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "gc_worker"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(GC_WORKER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    server = ForkServer(["gc_worker.__main__"])
    server.start()
    report = tmp_path / "gc.txt"
    read_end, write_end = os.pipe()
    try:
        worker = server.spawn("gc_worker", [str(report)], dict(os.environ), write_end)
        deadline = time.monotonic() + 30
        while not report.exists() or not report.read_text():
            assert time.monotonic() < deadline, "the worker never reported"
            time.sleep(0.02)
        enabled, frozen = report.read_text().split()
        assert enabled == "True"  # off in the fork server only
        assert int(frozen) > 0
        del worker
    finally:
        os.close(read_end)
        os.close(write_end)
        server.close()
