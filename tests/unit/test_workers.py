"""The worker settings and the parent's port reservation (scrollback.server.workers)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from history_service.config import HistoryConfig
from media_service.config import MediaConfig
from scrollback.server.service_config import ConfigError
from scrollback.server.stream_limits import SharedStreamCounter
from scrollback.server.workers import _Workers, default_workers, reserve_port


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
    one = SharedStreamCounter(tmp_path / "streams.sqlite3")
    other = SharedStreamCounter(tmp_path / "streams.sqlite3")
    other._pid += 1  # stands for a second worker process: its own row
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
