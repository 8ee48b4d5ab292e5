"""Long tail figure: a latest window while a line index build of a newline-less tail runs.

One history server over two transcripts: a small one, and one that ends in a
run of `tail_bytes` with no newline (sparse, so cheap on disk). Each
round times the small transcript's latest window (`batch` in a row) with the
tail's latest window sent at the same moment. A "building" round first grows
the tail by `tail_bytes`: the tail's window answers LONG_TAIL_PENDING at once
and has the line index of the growth built in the background, while the small
window is timed. An "idle" round first waits until the tail is served (no
build running). Target: building <= 1.5x idle.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from scrollback.history.v1 import history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.transcripts import write_transcript

GIB = 1 << 30
MB = 1_000_000
# How long a tail's index build may take before the bench gives up on it (seconds).
BUILD_TIMEOUT = 600.0
# The end of a grown tail read after growing it: over the max line size (16 MiB by default).
WARM_BYTES = 32 * 1024 * 1024


def start_tail(path: Path, length: int) -> None:
    """A line that starts and goes on for `length` bytes with no newline (a hole: zeros)."""
    with open(path, "ab") as handle:
        handle.write(b'{"type":"user","uuid":"tail","message":"')
        handle.truncate(handle.tell() + length)


def settle(path: Path, grow_by: int = 0) -> None:
    """Between rounds: the tail grown by `grow_by` (still no newline, as an agent writing one
    huge line), the zeros read from its hole dropped from the page cache, its end read once.

    A real tail is read from the page cache once; gigabytes of a hole read anew
    each round would churn the machine's cache instead. Its end is read as
    bytes just written are cached: a window reads back up to the max line size
    there, in either kind of round.
    """
    with open(path, "r+b") as handle:
        size = os.fstat(handle.fileno()).st_size + grow_by
        handle.truncate(size)
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        position = max(0, size - WARM_BYTES)
        while position < size:
            position += len(os.pread(handle.fileno(), 1 << 20, position)) or size


async def tail_pending(stub: history_pb2_grpc.HistoryServiceAsyncStub) -> bool:
    """The tail transcript's latest window: True if it answered UNAVAILABLE (still located)."""
    try:
        await services.read_window(stub, "tail", page_size=10)
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return True
    return False


async def tail_served(stub: history_pb2_grpc.HistoryServiceAsyncStub) -> None:
    """Wait until the tail transcript's latest window is served (its build ended)."""
    deadline = time.monotonic() + BUILD_TIMEOUT
    while await tail_pending(stub):
        if time.monotonic() > deadline:
            raise RuntimeError("the long tail's line index was never built")
        await asyncio.sleep(0.05)


async def measure(
    work: Path,
    *,
    tail_bytes: int,
    small_bytes: int,
    image_bytes: int,
    repeats: int,
    batch: int,
    log: Callable[[str], None],
) -> list[Figure]:
    """The figure, on transcripts written under `work`."""
    project = work / "long-tail-root" / "bench"
    write_transcript(project / "small.jsonl", small_bytes, image_bytes=image_bytes)
    tail = project / "tail.jsonl"
    write_transcript(tail, small_bytes, image_bytes=image_bytes)
    start_tail(tail, tail_bytes)
    tail_label = f"{tail_bytes / GIB:,.0f} GiB"
    small_label = f"{small_bytes / MB:,.0f} MB"
    log(f"long tail: a {tail_label} newline-less tail beside a {small_label} transcript")
    server_proc = procs.history_server(project.parent, work / "state-long-tail")
    async with server_proc as server, services.channel(server.addr) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        await tail_served(stub)  # the tail's first build runs before the timed rounds
        still_building = tail_answered = 0

        async def beside_tail(round_number: int) -> tuple[float, bool]:
            """The small window timed, the tail's latest window sent at the same moment:
            (seconds, whether the tail was served)."""
            poke = asyncio.ensure_future(tail_pending(stub))
            seconds = await services.timed(lambda: services.read_window(stub, "small"), batch)
            return seconds, not await poke

        async def idle(round_number: int) -> float | None:
            await tail_served(stub)
            await asyncio.to_thread(settle, tail)
            seconds, _served = await beside_tail(round_number)
            return seconds

        async def building(round_number: int) -> float | None:
            nonlocal still_building, tail_answered
            await tail_served(stub)
            await asyncio.to_thread(settle, tail, tail_bytes)
            # The tail's window starts the build of the growth.
            seconds, served = await beside_tail(round_number)
            tail_answered += served
            still_building += await tail_pending(stub)
            return seconds

        medians = await services.interleave({"idle": idle, "building": building}, repeats)
        await tail_served(stub)
    return [
        Figure(
            key="long_tail_window",
            name=f"latest window of a {small_label} transcript while the line index of a "
            f"{tail_label} newline-less tail is built vs with no build running",
            figure=medians["building"] * 1e3,
            baseline=medians["idle"] * 1e3,
            unit="ms",
            baseline_label="no build",
            ratio=medians["building"] / medians["idle"],
            target=Target("<=", 1.5),
            note=f"the tail's own window, sent at the same moment, was served (not "
            f"LONG_TAIL_PENDING) in {tail_answered} of {repeats} rounds; the build still ran "
            f"after the timed windows in {still_building}",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.long_tail [--tail-gib N]`: this figure alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tail-gib", type=float, default=8.0, help="the tail, GiB (8)")
    parser.add_argument("--small-mb", type=float, default=5.0, help="the small transcript (5)")
    parser.add_argument("--image-kb", type=float, default=750.0, help="raw image bytes, KB (750)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats (15)")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback long tail bench",
        lambda work, log: measure(
            work,
            tail_bytes=int(args.tail_gib * GIB),
            small_bytes=int(args.small_mb * MB),
            image_bytes=int(args.image_kb * 1000),
            repeats=args.repeats,
            batch=5,
            log=log,
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
