"""Both services served by two worker processes on one port: real process trees, real SQLite.

Each call names the worker that served it (`scrollback-worker-pid` trailing
metadata); channels with their own connection are opened until both workers
are reached, then the cross-worker rules are checked: a watch hears an
accept made on the other worker, a retried accept is one record whichever
worker takes it, the per-principal stream limit is the service's, metrics
sum every worker, and SIGTERM ends the whole tree with status 0.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from tests.support.servers import user_line
from tests.support.workers import (
    WorkerService,
    channels_on_distinct_workers,
    new_channel,
    worker_of,
)

SESSION = "0b7e1c2a-5d4f-4b8e-9a61-3f2d1c0b9a87"
# Whole processes and real terminals: CI runs these, the quick loop leaves them out.
pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _history_pid(channel: grpc.Channel) -> int:
    stub = history_pb2_grpc.HistoryServiceStub(channel)
    _, call = stub.ListSessions.with_call(history_pb2.ListSessionsRequest(), timeout=10)
    return worker_of(call)


def _media_pid(channel: grpc.Channel) -> int:
    stub = media_pb2_grpc.MediaServiceStub(channel)
    _, call = stub.FindMissingBlobs.with_call(media_pb2.FindMissingBlobsRequest(), timeout=10)
    return worker_of(call)


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root, state = tmp_path / "root", tmp_path / "state"
    (root / "proj").mkdir(parents=True)
    state.mkdir()
    (root / "proj" / f"{SESSION}.jsonl").write_bytes(user_line("u-1", "hello"))
    return root, state


@pytest.fixture
def history(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WorkerService]:
    root, state = _tree(tmp_path)
    env: dict[str, str] = getattr(request, "param", {})
    service = WorkerService("history_service", root, state, env=env)
    try:
        yield service
    finally:
        service.stop()


def _accept(channel: grpc.Channel, txn: str, text: str) -> tuple[Any, int]:
    stub = history_pb2_grpc.HistoryServiceStub(channel)
    response, call = stub.AcceptMessage.with_call(
        history_pb2.AcceptMessageRequest(client_txn_id=txn, session_id=SESSION, text=text),
        timeout=10,
    )
    return response, worker_of(call)


# A budget of two calls per principal, and heartbeats every 0.1 s: a watch's first
# message says the server admitted it (probing with calls of the same principal instead
# could take a slot before the second watch and get that watch refused).
BUDGET_OF_TWO_WITH_HEARTBEATS = {
    "SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL": "2",
    "SCROLLBACK_HISTORY_HEARTBEAT_SECONDS": "0.1",
}


def _admitted_watches(channel: grpc.Channel, count: int) -> list[Any]:
    """`count` watches on one channel, each known admitted by its first heartbeat."""
    streams: list[Any] = []
    for _ in range(count):
        stream: Any = history_pb2_grpc.HistoryServiceStub(channel).WatchSession(
            history_pb2.WatchSessionRequest(session_id=SESSION), timeout=60
        )
        assert next(stream).WhichOneof("event") == "heartbeat"
        streams.append(stream)
    return streams


def test_calls_land_on_both_workers_of_one_port(history: WorkerService) -> None:
    workers = history.worker_pids()
    assert len(workers) == 2
    pairs = channels_on_distinct_workers(history.addr, _history_pid)
    assert {pid for _, pid in pairs} == workers


def test_watch_on_one_worker_hears_an_accept_made_on_the_other(history: WorkerService) -> None:
    (watching, watch_pid), (accepting, accept_pid) = channels_on_distinct_workers(
        history.addr, _history_pid
    )
    assert watch_pid != accept_pid
    stub = history_pb2_grpc.HistoryServiceStub(watching)
    # A position taken before the accept: the watch hears it whenever it opens.
    bootstrap: Any = stub.Bootstrap(history_pb2.BootstrapRequest(session_id=SESSION), timeout=10)
    header = next(bootstrap).header
    bootstrap.cancel()
    stream: Any = stub.WatchSession(
        history_pb2.WatchSessionRequest(session_id=SESSION, position=header.watch_position),
        timeout=60,
    )
    events: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for event in stream:
                events.put(event)
        except grpc.RpcError:
            pass

    threading.Thread(target=read, daemon=True).start()
    response, pid = _accept(accepting, "txn-cross", "from the other worker")
    assert pid == accept_pid
    sent = time.monotonic()
    heard = None
    while heard is None and time.monotonic() < sent + 10:
        try:
            event = events.get(timeout=0.1)
        except queue.Empty:
            continue
        if event.WhichOneof("event") == "accepted":
            heard = event.accepted
    waited = time.monotonic() - sent
    assert heard is not None, "the watch never heard the accept"
    assert heard.seq == response.message.seq
    assert heard.text == "from the other worker"
    assert waited < 5, f"the wake-up took {waited:.1f} s"
    stream.cancel()


def test_a_retried_accept_is_one_record_whichever_worker_takes_it(
    history: WorkerService,
) -> None:
    (first, first_pid), (second, second_pid) = channels_on_distinct_workers(
        history.addr, _history_pid
    )
    original, pid_a = _accept(first, "txn-retry", "once")
    replay, pid_b = _accept(second, "txn-retry", "once")
    assert (pid_a, pid_b) == (first_pid, second_pid)
    assert not original.replayed
    assert replay.replayed
    assert replay.message.seq == original.message.seq
    with pytest.raises(grpc.RpcError) as conflict:
        _accept(second, "txn-retry", "different text")
    assert conflict.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize("history", [BUDGET_OF_TWO_WITH_HEARTBEATS], indirect=True)
def test_the_per_principal_stream_limit_holds_across_workers(history: WorkerService) -> None:
    (one, one_pid), (other, other_pid) = channels_on_distinct_workers(history.addr, _history_pid)
    streams = _admitted_watches(one, 2)  # the whole budget, on the first worker
    with pytest.raises(grpc.RpcError) as raised:
        _history_pid(other)
    refused = raised.value
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert worker_of(refused) == other_pid != one_pid
    for stream in streams:
        stream.cancel()
    deadline = time.monotonic() + 10
    while True:  # the budget comes back once the streams end
        try:
            _history_pid(other)
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "the budget never came back"
            time.sleep(0.1)


@pytest.mark.parametrize(
    "history", [{"SCROLLBACK_HISTORY_METRICS_ADDR": "127.0.0.1:0"}], indirect=True
)
def test_metrics_sum_every_worker(history: WorkerService) -> None:
    pairs = channels_on_distinct_workers(history.addr, _history_pid)
    calls = 0
    for channel, _ in pairs:
        for _ in range(5):
            _history_pid(channel)
            calls += 1
    assert history.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{history.metrics_port}/metrics") as reply:
        text = reply.read().decode()
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("scrollback_rpc_requests_total{")
        and 'method="ListSessions"' in line
        and 'code="OK"' in line
    )
    # The probes that found the two workers are ListSessions calls too.
    assert counted >= calls + len(pairs)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_stops_every_worker_with_status_0(
    tmp_path: Path, sig: signal.Signals
) -> None:
    root, state = _tree(tmp_path)
    service = WorkerService("media_service", root, state)
    workers = service.worker_pids()
    assert len(workers) == 2
    assert {pid for _, pid in channels_on_distinct_workers(service.addr, _media_pid)} == workers
    assert service.stop(sig) == 0
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def test_a_killed_parent_takes_its_workers_down(tmp_path: Path) -> None:
    root, state = _tree(tmp_path)
    service = WorkerService("history_service", root, state)
    workers = service.worker_pids()
    service.process.kill()
    service.process.wait()
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() and not _is_zombie(pid) for pid in workers):
        assert time.monotonic() < deadline, "orphaned workers kept running"
        time.sleep(0.1)


def _scrollback_up(tmp_path: Path) -> tuple[subprocess.Popen[str], str, str]:
    """`scrollback up --workers 2` over a one-session tree: the process, history's and
    media's addresses."""
    root, state = _tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "scrollback_app.cli", "up", "--workers", "2",
         "--transcripts", str(root), "--state", str(state),
         "--history-addr", "127.0.0.1:0", "--media-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r"history on \S+:(\d+), media on \S+:(\d+)", line)
    if not found:
        process.kill()
        process.wait()
    assert found, line
    history_addr, media_addr = (f"127.0.0.1:{port}" for port in found.groups())
    return process, history_addr, media_addr


def test_scrollback_up_runs_each_service_as_workers(tmp_path: Path) -> None:
    process, history_addr, media_addr = _scrollback_up(tmp_path)
    try:
        history_pids = {p for _, p in channels_on_distinct_workers(history_addr, _history_pid)}
        media_pids = {p for _, p in channels_on_distinct_workers(media_addr, _media_pid)}
        assert len(history_pids | media_pids) == 4
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        for pid in history_pids | media_pids:
            assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _children(pid: int) -> set[int]:
    """The children of `pid`, whichever of its threads started them."""
    return {
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    }


def test_scrollback_up_forks_every_worker_from_one_process_and_their_metrics_add_up(
    tmp_path: Path,
) -> None:
    """`up` starts one fork server that imported both services and forks the four workers
    from it (each a copy of it, not a fresh interpreter: its command line), re-parented
    to `up`, which supervises them; counts of forked workers still reach the parent's
    metrics, and a stop leaves no process behind."""
    root, state = _tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    env["SCROLLBACK_HISTORY_METRICS_ADDR"] = "127.0.0.1:0"
    log = tmp_path / "up.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "scrollback_app.cli", "up", "--workers", "2",
             "--transcripts", str(root), "--state", str(state),
             "--history-addr", "127.0.0.1:0", "--media-addr", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )  # fmt: skip
    try:
        assert process.stdout is not None
        found = re.search(r"history on \S+:(\d+), media on \S+:(\d+)", process.stdout.readline())
        assert found, log.read_text()
        history_addr, media_addr = (f"127.0.0.1:{port}" for port in found.groups())
        pairs = channels_on_distinct_workers(history_addr, _history_pid)
        workers = {p for _, p in pairs}
        workers |= {p for _, p in channels_on_distinct_workers(media_addr, _media_pid)}
        assert len(workers) == 4
        children = _children(process.pid)
        assert workers < children
        (forkserver,) = children - workers
        image = Path(f"/proc/{forkserver}/cmdline").read_bytes()
        assert b"scrollback.server.forkserver" in image
        assert all(Path(f"/proc/{pid}/cmdline").read_bytes() == image for pid in workers)
        calls = 0
        for channel, _ in pairs:
            for _ in range(5):
                _history_pid(channel)
                calls += 1
        metrics = re.search(r"history_service: metrics on port (\d+)", log.read_text())
        assert metrics, log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.group(1)}/metrics") as reply:
            text = reply.read().decode()
        counted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("scrollback_rpc_requests_total{")
            and 'method="ListSessions"' in line
            and 'code="OK"' in line
        )
        assert counted >= calls + len(pairs)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        for pid in {*workers, forkserver}:
            assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _mapped_libraries(pid: int) -> set[str]:
    """The shared objects process `pid` has mapped (its /proc/<pid>/maps)."""
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return {
            fields[5] for fields in map(str.split, maps) if len(fields) > 5 and ".so" in fields[5]
        }


# The native parts of what only some paths need: PostgreSQL, slim's downscale, thumbnails,
# YAML token files. A worker that served none of them has not loaded them.
PATH_ONLY_LIBRARIES = ("psycopg", "/PIL/", "pillow.libs", "vips", "/yaml/")


def test_scrollback_ups_processes_load_only_what_they_serve(tmp_path: Path) -> None:
    """The parent of `up`'s workers serves no RPC: no grpc library in it (nor the other
    commands' client). Its workers serve: grpc, but none of the libraries of paths
    not taken (their memory is each worker's own)."""
    process, history_addr, media_addr = _scrollback_up(tmp_path)
    try:
        workers = {p for _, p in channels_on_distinct_workers(history_addr, _history_pid)}
        workers |= {p for _, p in channels_on_distinct_workers(media_addr, _media_pid)}
        assert len(workers) == 4
        assert not any("cygrpc" in path for path in _mapped_libraries(process.pid))
        for pid in workers:
            libraries = _mapped_libraries(pid)
            assert any("cygrpc" in path for path in libraries)
            loaded = [p for p in libraries if any(name in p for name in PATH_ONLY_LIBRARIES)]
            assert loaded == [], pid
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_parent_killed_while_its_workers_start_takes_them_down(tmp_path: Path) -> None:
    root, state = _tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    parent = subprocess.Popen(
        [sys.executable, "-m", "history_service", "--transcripts", str(root),
         "--state", str(state), "--addr", "127.0.0.1:0", "--workers", "2"],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    deadline = time.monotonic() + 30
    workers: set[int] = set()
    while len(workers) < 2:  # both spawned, before they serve
        assert time.monotonic() < deadline, "the workers never started"
        workers = {int(p) for p in children.read_text().split()}
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and not _is_zombie(pid) for pid in workers):
        assert time.monotonic() < deadline, "orphaned workers kept running"
        time.sleep(0.1)


def _run_second(*argv: str) -> subprocess.CompletedProcess[str]:
    """A second service started with `argv`; it must end by itself, soon."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    return subprocess.run(
        [sys.executable, "-m", *argv], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("first_workers", "second"),
    [(2, "workers"), (2, "scrollback up"), (2, "one process"), (1, "workers")],
)
def test_a_second_service_on_a_port_in_use_fails_at_once(
    tmp_path: Path, first_workers: int, second: str
) -> None:
    root, state = _tree(tmp_path)
    first = WorkerService("history_service", root, state, workers=first_workers)
    try:
        other_state = tmp_path / "other-state"
        other_state.mkdir()
        flags = ["--transcripts", str(root), "--state", str(other_state)]
        if second == "scrollback up":
            argv = ["scrollback_app.cli", "up", *flags, "--workers", "2",
                    "--history-addr", first.addr, "--media-addr", "127.0.0.1:0"]  # fmt: skip
        else:
            workers = "2" if second == "workers" else "1"
            argv = ["history_service", *flags, "--addr", first.addr, "--workers", workers]
        ended = _run_second(*argv)
        assert ended.returncode == 2, ended.stderr[-2000:]
        assert f"cannot listen on {first.addr}: the port is in use" in ended.stderr
        # Every connection still reaches the first service's workers.
        for _ in range(6):
            channel = new_channel(first.addr)
            with channel:
                stub = history_pb2_grpc.HistoryServiceStub(channel)
                sessions = stub.ListSessions(history_pb2.ListSessionsRequest(), timeout=10)
                assert [s.session_id for s in sessions.sessions] == [SESSION]
        assert first.process.poll() is None
    finally:
        assert first.stop() == 0


def _replaced(service: WorkerService, victim: int) -> set[int]:
    """The workers once `victim` is gone and its replacement serves (polled, with a deadline)."""
    deadline = time.monotonic() + 60
    while True:
        workers = service.worker_pids()
        serving = {int(p) for p in re.findall(r"worker (\d+) serving", "".join(service.lines))}
        if victim not in workers and len(workers) == 2 and workers & serving:
            return workers
        assert service.process.poll() is None, "the parent exited"
        assert time.monotonic() < deadline, "no replacement came up"
        time.sleep(0.05)


def test_a_killed_worker_is_logged_and_replaced_while_the_service_serves(
    history: WorkerService,
) -> None:
    workers = history.worker_pids()
    (kept, kept_pid), (_, victim) = channels_on_distinct_workers(history.addr, _history_pid)
    os.kill(victim, signal.SIGKILL)
    now = _replaced(history, victim)
    assert kept_pid in now
    log = "".join(history.lines)
    assert f"worker {victim} was killed by SIGKILL; starting another" in log
    # The survivor served all along, and connections reach the replacement too.
    assert _history_pid(kept) == kept_pid
    assert {pid for _, pid in channels_on_distinct_workers(history.addr, _history_pid)} == now
    assert now != workers and history.process.poll() is None
    assert history.stop() == 0


@pytest.mark.parametrize("history", [BUDGET_OF_TWO_WITH_HEARTBEATS], indirect=True)
def test_the_streams_of_a_killed_worker_give_their_budget_back(history: WorkerService) -> None:
    (one, victim), (other, _) = channels_on_distinct_workers(history.addr, _history_pid)
    streams = _admitted_watches(one, 2)
    with pytest.raises(grpc.RpcError) as refused:  # both streams hold the whole budget
        _history_pid(other)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    os.kill(victim, signal.SIGKILL)
    _replaced(history, victim)
    try:
        # The dead worker's two calls no longer count: the whole budget is free again.
        assert _history_pid(other) > 0
    finally:
        for stream in streams:
            stream.cancel()


def test_a_replacement_that_cannot_start_stops_the_service_with_its_status(
    history: WorkerService, tmp_path: Path
) -> None:
    victim = min(history.worker_pids())
    (tmp_path / "root").rename(tmp_path / "moved")  # a new worker's configuration is invalid
    os.kill(victim, signal.SIGKILL)
    assert history.wait(60) == 2
    log = "".join(history.lines)
    assert f"worker {victim} was killed by SIGKILL; starting another" in log
    assert "the transcripts root (SCROLLBACK_TRANSCRIPTS) is not a directory" in log
    assert re.search(r"worker \d+ exited with status 2; stopping the service", log)


def test_scrollback_up_ends_when_a_replacement_cannot_start(tmp_path: Path) -> None:
    root, state = _tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "scrollback_app.cli", "up", "--workers", "2",
         "--transcripts", str(root), "--state", str(state),
         "--history-addr", "127.0.0.1:0", "--media-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        found = re.search(r"history on \S+:(\d+)", process.stdout.readline())
        assert found
        history_addr = f"127.0.0.1:{found.group(1)}"
        (_, victim), _ = channels_on_distinct_workers(history_addr, _history_pid)
        root.rename(tmp_path / "moved")  # a new worker's configuration is invalid
        os.kill(victim, signal.SIGKILL)
        _, errors = process.communicate(timeout=60)
        assert process.returncode == 2
        assert f"worker {victim} was killed by SIGKILL; starting another" in errors
        assert "scrollback up: the history service stopped" in errors
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
