"""Idle memory of `scrollback up`: PSS summed over its processes, vs a bare grpc process.

`scrollback up` runs as a parent and each service's worker processes
(scrollback.server.workers). RSS counts a shared page once per process that
maps it (libpython, grpc's library, pages shared with a parent), so the sum
over processes overstates what they take together; PSS
(`/proc/<pid>/smaps_rollup`) divides each page among the processes mapping
it, and its sum is what the service adds to the machine (less any share that
unrelated processes map too, which the baseline, measured in the same run,
pays alike). The service runs with its default workers over an empty
transcripts root: its own footprint, before any transcript is read. The
baseline is one `python -c "import grpc"` process, the least a gRPC server
in Python can take.

A second figure times `scrollback up` from its spawn until both services'
gRPC health checks say SERVING (median of START_REPEATS starts after one
untimed, on a warm machine), beside a bare `python -c "import grpc"` process's
spawn until it runs.

`python -m scrollback_app.bench.idle` runs these figures alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scrollback_app.bench import procs
from scrollback_app.bench.figures import Figure, Target

MB = 1_000_000
# The most both services, parent and workers, may take together at idle.
TARGET_MB = 100
READY_TIMEOUT_SECONDS = 60.0
# Idle means: the summed PSS moved less than this between two readings SETTLE_SECONDS apart.
SETTLE_FRACTION = 0.01
SETTLE_SECONDS = 1.0
SETTLE_TIMEOUT_SECONDS = 30.0
READY_LINE = "Ctrl-C stops"
# Starts of `up` timed (after one untimed) and the most it may take to serve.
START_REPEATS = 3
START_TARGET_SECONDS = 1.5
# The health-check client tries to connect again this often while nothing listens yet.
RETRY_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 10),
    ("grpc.min_reconnect_backoff_ms", 10),
    ("grpc.max_reconnect_backoff_ms", 10),
]
BARE = "import sys, grpc\nprint('ready', flush=True)\nsys.stdin.read()\n"
UP = "import sys\nfrom scrollback_app.cli import main\nsys.exit(main())\n"


def pss_kib(pid: int) -> int:
    """The process's proportional set size (Pss of /proc/<pid>/smaps_rollup), in KiB."""
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise KeyError("Pss")


def tree_pss_kib(pid: int) -> tuple[int, int]:
    """PSS summed over `pid` and its descendants (KiB), and how many processes that was."""
    total = count = 0
    for each in procs.process_tree(pid):
        with contextlib.suppress(OSError, KeyError):
            total += pss_kib(each)
            count += 1
    return total, count


def _environment() -> dict[str, str]:
    """The bench's environment without its SCROLLBACK_* settings: `up` on its defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}


def _wait_for_line(process: subprocess.Popen[str], text: str) -> None:
    """Read the process's stdout until a line holds `text`; RuntimeError if it ends first."""
    assert process.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    for line in process.stdout:
        if text in line:
            return
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"the process did not print {text!r} (exit status {process.poll()})")


def _settled_pss(pid: int) -> tuple[int, int]:
    """The tree's PSS (KiB) and process count once two readings a second apart agree."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    last, count = tree_pss_kib(pid)
    while True:
        time.sleep(SETTLE_SECONDS)
        now, count = tree_pss_kib(pid)
        if abs(now - last) <= last * SETTLE_FRACTION or time.monotonic() > deadline:
            return now, count
        last = now


def _stop(process: subprocess.Popen[str], sig: int) -> None:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def bare_grpc_pss() -> int:
    """PSS (KiB) of a Python process that imported grpc and waits."""
    process = subprocess.Popen(
        [sys.executable, "-c", BARE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    try:
        _wait_for_line(process, "ready")
        return _settled_pss(process.pid)[0]
    finally:
        assert process.stdin is not None
        process.stdin.close()
        _stop(process, 15)


def up_pss(work: Path, args: Sequence[str] = ()) -> tuple[int, int]:
    """PSS (KiB) summed over an idle `scrollback up` on its default workers, and its process
    count. `args` are further flags of `up`."""
    root, state = work / "idle-root", work / "idle-state"
    root.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-c", UP, "up", "--transcripts", str(root), "--state", str(state),
        "--history-addr", "127.0.0.1:0", "--media-addr", "127.0.0.1:0", *args,
    ]  # fmt: skip
    with (work / "idle-up.log").open("w") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=_environment(),
        )
        try:
            _wait_for_line(process, READY_LINE)
            return _settled_pss(process.pid)
        finally:
            _stop(process, 2)  # SIGINT, as Ctrl-C


def _serving(addr: str, deadline: float) -> None:
    """Wait until the gRPC health check at `addr` says SERVING (RuntimeError at `deadline`)."""
    # A refused connection puts a channel in reconnect backoff (a second at first): the
    # figure would be when the client tried again, not when the service began to serve.
    with grpc.insecure_channel(addr, options=RETRY_OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.01)
    raise RuntimeError(f"nothing SERVING at {addr}")


def up_start_seconds(work: Path) -> float:
    """Seconds from spawning `scrollback up` (default workers, an empty root) until both
    services' health checks say SERVING."""
    root, state = work / "start-root", work / "start-state"
    root.mkdir(parents=True, exist_ok=True)
    history, media = f"127.0.0.1:{procs.free_port()}", f"127.0.0.1:{procs.free_port()}"
    command = [
        sys.executable, "-c", UP, "up", "--transcripts", str(root), "--state", str(state),
        "--history-addr", history, "--media-addr", media,
    ]  # fmt: skip
    with (work / "start-up.log").open("w") as log:
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=_environment(),
        )
        try:
            deadline = started + READY_TIMEOUT_SECONDS
            _serving(history, deadline)
            _serving(media, deadline)
            return time.monotonic() - started
        finally:
            if process.poll() is None:
                process.send_signal(2)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def bare_start_seconds() -> float:
    """Seconds from spawning `python -c "import grpc"` until it runs."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import grpc"], check=True, env=_environment())
    return time.monotonic() - started


def start_figure(work: Path) -> Figure:
    """The `up_start_serving` figure (blocking)."""
    up_start_seconds(work)  # untimed: a warm machine
    ups = sorted(up_start_seconds(work) for _ in range(START_REPEATS))
    bares = sorted(bare_start_seconds() for _ in range(START_REPEATS))
    up, bare = ups[len(ups) // 2], bares[len(bares) // 2]
    return Figure(
        key="up_start_serving",
        name="`scrollback up` from its spawn until both health checks say SERVING, vs a bare "
        "`python -c 'import grpc'` process's run",
        figure=up,
        baseline=bare,
        unit="s",
        baseline_label="bare grpc",
        ratio=up / bare,
        target=Target(figure_max=START_TARGET_SECONDS),
    )


async def measure(work: Path, log: Callable[[str], None]) -> list[Figure]:
    """The figures: `scrollback up` idle vs a bare grpc process, measured one after the other,
    and its start."""
    up_kib, processes = await asyncio.to_thread(up_pss, work)
    bare_kib = await asyncio.to_thread(bare_grpc_pss)
    up_mb, bare_mb = up_kib * 1024 / MB, bare_kib * 1024 / MB
    log(f"idle: scrollback up {up_mb:.0f} MB PSS over {processes} processes, bare {bare_mb:.0f}")
    return [
        Figure(
            key="idle_pss_up",
            name=f"idle memory of `scrollback up` on its default workers: PSS summed over its "
            f"{processes} processes, vs one `python -c 'import grpc'` process",
            figure=up_mb,
            baseline=bare_mb,
            unit="MB",
            baseline_label="bare grpc",
            ratio=up_mb / bare_mb,
            target=Target(figure_max=TARGET_MB),
        ),
        await asyncio.to_thread(start_figure, work),
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.idle`: this figure alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    return run_alone("scrollback idle memory bench", measure)


if __name__ == "__main__":
    sys.exit(main())
