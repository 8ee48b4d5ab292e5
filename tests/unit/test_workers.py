"""The worker settings and the parent's port reservation (scrollback.server.workers)."""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from history_service.config import HistoryConfig
from media_service.config import MediaConfig
from scrollback.server.listening import listen_reason
from scrollback.server.service_config import ConfigError
from scrollback.server.stream_limits import SLOTS, SharedStreamCounter
from scrollback.server.workers import PortClaim, Supervisor, _Workers, default_workers, reserve_port


def test_workers_default_to_the_cores_and_read_the_environment(tmp_path: Path) -> None:
    assert HistoryConfig.from_env({}).workers == default_workers() >= 1
    assert MediaConfig.from_env({}).workers == default_workers()
    assert HistoryConfig.from_env({"SCROLLBACK_HISTORY_WORKERS": "3"}).workers == 3
    assert MediaConfig.from_env({"SCROLLBACK_MEDIA_WORKERS": "3"}).workers == 3
    with pytest.raises(ConfigError, match="workers"):
        HistoryConfig.from_env({"SCROLLBACK_HISTORY_WORKERS": "0"}, transcripts=tmp_path).validate()
    with pytest.raises(ConfigError, match="workers"):
        MediaConfig.from_env({"SCROLLBACK_MEDIA_WORKERS": "0"})


def test_port_0_is_reserved_as_a_real_port_that_workers_can_share() -> None:
    reserved, port = reserve_port("127.0.0.1:0")
    with reserved:
        assert port > 0
        worker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with worker:  # as grpc.so_reuseport binds it
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            worker.bind(("127.0.0.1", port))
        plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with plain, pytest.raises(OSError):  # anyone else: the port is taken
            plain.bind(("127.0.0.1", port))


def test_the_shared_count_is_one_budget_for_every_process(tmp_path: Path) -> None:
    one = SharedStreamCounter(tmp_path / "streams.table")
    other = SharedStreamCounter(tmp_path / "streams.table")  # as a second worker maps it
    try:
        assert one.acquire("alice", 2)
        assert other.acquire("alice", 2)
        assert not one.acquire("alice", 2) and not other.acquire("alice", 2)
        assert one.acquire("bob", 2)
        other.release("alice")
        assert one.total("alice") == 1
        assert one.acquire("alice", 2)
    finally:
        one.close()
        other.close()


def _ended(*codes: str) -> _Workers:
    """Workers that are real processes, each ended by the Python statement given."""
    processes = [
        subprocess.Popen([sys.executable, "-c", f"import os, signal, sys; {code}"])
        for code in codes
    ]
    for process in processes:
        process.wait(30)
    return _Workers(processes)


def test_the_service_status_of_ended_workers() -> None:
    term = "os.kill(os.getpid(), signal.SIGTERM)"
    # A worker still starting when the stop was forwarded dies of SIGTERM: a clean stop.
    assert _ended("sys.exit(0)", term).status() == 0
    assert _ended("os.kill(os.getpid(), signal.SIGINT)").status() == 0
    # A worker's own status wins (2: a configuration error), whatever the others did.
    assert _ended(term, "sys.exit(2)").status() == 2
    # A crash or a kill after the grace is a failure.
    assert _ended(term, "os.kill(os.getpid(), signal.SIGKILL)").status() == 1


def _admit_many(path: str, limit: int, tries: int, start: Any, results: Any) -> None:
    counter = SharedStreamCounter(Path(path))
    start.wait()
    admitted = sum(counter.acquire("carol", limit) for _ in range(tries))
    counter.close()
    results.put(admitted)


def test_worker_processes_racing_for_the_last_slots_admit_exactly_the_limit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "streams.table"
    SharedStreamCounter(path).close()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_admit_many, args=(str(path), 500, 400, start, results))
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    admitted = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
    assert sum(admitted) == 500  # 1600 tries, never one over the service's limit
    counter = SharedStreamCounter(path)
    try:
        assert counter.total("carol") == 500
    finally:
        counter.close()


def test_a_full_table_refuses_new_keys_and_frees_slots_with_no_calls(tmp_path: Path) -> None:
    counter = SharedStreamCounter(tmp_path / "streams.table")
    try:
        for number in range(SLOTS):
            assert counter.acquire(f"p{number}", 1)
        assert not counter.acquire("one-too-many", 1)  # every slot holds a call
        assert counter.total("one-too-many") == 0
        counter.release("p7")
        assert counter.acquire("one-too-many", 1)  # p7's slot, free now, is taken
        assert counter.total("one-too-many") == 1 and counter.total("p7") == 0
        assert not counter.acquire("p8", 1)  # p8 still at its limit of 1
        counter.release("one-too-many")
        assert counter.acquire("p7", 1)  # the key comes back in a free slot
        for number in range(SLOTS):
            counter.release(f"p{number}")
        assert all(counter.total(f"p{number}") == 0 for number in range(SLOTS))
    finally:
        counter.close()


@pytest.mark.parametrize("service", ["history_service", "media_service"])
def test_the_workers_parent_loads_no_grpc_protobuf_or_stripper(service: str) -> None:
    """The parent of a service's workers imports its `__main__`'s modules only: not
    grpc, the protobuf runtime or the stripper, each several MB in a process
    that serves nothing (the RSS benchmarks count the parent with its workers)."""
    probe = (
        "import runpy, sys\n"
        f"runpy.run_module('{service}.__main__', run_name='not_main')\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    heavy = {"grpc", "google.protobuf", "scrollback.contract.stripping", f"{service}.server"}
    assert loaded & heavy == set()
    assert f"{service}.config" in loaded and "scrollback.server.service_cli" in loaded


@pytest.mark.parametrize("service", ["history_service", "media_service"])
def test_a_worker_loads_no_module_that_only_some_paths_need(service: str) -> None:
    """A worker imports its `__main__` and `server`: not the PostgreSQL driver (SQLite is
    the default), Pillow, libvips (thumbnails, slim's downscale) or PyYAML (YAML token
    files); each loads on the path that needs it, not in every worker's memory."""
    probe = (
        "import importlib, sys\n"
        f"importlib.import_module('{service}.__main__')\n"
        f"importlib.import_module('{service}.server')\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    assert f"{service}.server" in loaded and "grpc" in loaded
    assert loaded & {"psycopg", "psycopg_pool", "PIL", "pyvips", "yaml"} == set()


def test_the_parser_of_up_loads_no_other_commands_modules() -> None:
    """`scrollback up` builds its own parser alone: the other commands' flags import the
    client (grpc, protobuf), the gateway and the bench, which `up`'s parent, serving no
    RPC while its workers do, would keep in memory as long as it runs."""
    probe = (
        "import sys\n"
        "from scrollback_app.cli import _runs_up, build_parser\n"
        "assert _runs_up(['-v', 'up', '--workers', '2'])\n"
        "assert not _runs_up(['--help', 'up']) and not _runs_up(['sessions'])\n"
        "build_parser(only_up=True).parse_args(['up', '--workers', '2'])\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    heavy = {"grpc", "google.protobuf", "client", "gateway.config", "scrollback_app.bench.runner"}
    assert loaded & heavy == set()
    assert "scrollback.server.service_cli" in loaded


FAKE_WORKER = """
import os, pathlib, signal, sys
if pathlib.Path(os.environ["FAKE_WORKER_FAILS"]).exists():
    sys.exit(1)  # dies at start, before it serves
os.write(int(os.environ["SCROLLBACK_WORKER_READY_FD"]), f"{os.getpid()}\\n".encode())
signal.pause()
"""


def test_replacements_that_die_at_start_are_retried_later_and_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The supervisor over real worker processes (a module that serves nothing): a worker
    that had served is replaced at once; replacements dying before they serve wait 1 s,
    then 2 s; once one serves, the service is whole again."""
    (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)
    fails = tmp_path / "fails"
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_WORKER_FAILS", str(fails))
    caplog.set_level(logging.INFO, logger="scrollback.server.workers")
    supervisor = Supervisor("fake_worker", [], address="127.0.0.1:0", count=2)
    assert supervisor.start()
    try:
        victim = supervisor.workers.processes[0].pid
        fails.touch()
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "starting another in 2 s" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        fails.unlink()
        while "serving" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        deaths = re.findall(r"worker \d+ (.*?); starting another(.*)", caplog.text)
        assert deaths[:3] == [
            ("was killed by SIGKILL", ""),
            ("exited with status 1", " in 1 s"),
            ("exited with status 1", " in 2 s"),
        ]
        assert all(process.poll() is None for process in supervisor.workers.processes)
    finally:
        assert supervisor.stop() == 0


def test_a_second_claim_on_a_port_is_refused_until_the_first_is_given_up() -> None:
    reserved, port = reserve_port("127.0.0.1:0")
    with reserved:
        claim = PortClaim(port)
        with pytest.raises(OSError) as refused:
            PortClaim(port)
        assert refused.value.errno == errno.EADDRINUSE
        assert listen_reason(refused.value) == "the port is in use"
        claim.close()
        PortClaim(port).close()


def test_a_dead_workers_counts_are_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "streams.table"
    one = SharedStreamCounter(path, workers=2, worker=0)
    other = SharedStreamCounter(path, workers=2, worker=1)
    try:
        assert one.acquire("alice", 3) and one.acquire("alice", 3) and other.acquire("alice", 3)
        assert not other.acquire("alice", 3)
        one.forget_worker(0)  # as the parent does when worker 0 dies
        assert other.total("alice") == 1
        assert other.acquire("alice", 3) and other.acquire("alice", 3)
        assert not other.acquire("alice", 3)
    finally:
        one.close()
        other.close()


@pytest.mark.slow
def test_a_stop_while_a_replacement_waits_its_turn_is_a_clean_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)
    fails = tmp_path / "fails"
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FAKE_WORKER_FAILS", str(fails))
    caplog.set_level(logging.INFO, logger="scrollback.server.workers")
    supervisor = Supervisor("fake_worker", [], address="127.0.0.1:0", count=2)
    assert supervisor.start()
    try:
        fails.touch()
        os.kill(supervisor.workers.processes[1].pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "starting another in 1 s" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
    finally:
        # The dead workers were replaced or due to be: the stop itself went well.
        assert supervisor.stop() == 0
