"""ReadMedia while the servers index a transcript they never saw, vs the same ReadMedia idle.

A user who starts `scrollback up` on a large history scrolls while the
services index it: background work (line index builds, the search index's
pass) runs at nice 19, but on threads of the serving processes, whose GIL the
requests share. This figure reads a 1.3 MB photo again and again (straight
ReadMedia, already read once) beside a bare grpc.aio server streaming the same
bytes, first idle, then right after a freshly seen transcript of `big_bytes`
(text turns and small images: many lines, as a long working session has)
was moved under the root and touched as a viewer touches it (its latest
window read, one of its images asked for without a hint), while its first
indexing pass runs (timed once the services are seen spending CPU on it). The figure is the read's time during that pass against
its time idle, each a median of interleaved samples; the floor's own times
are printed beside them, since the machine's other load moves both.

`python -m scrollback_app.bench.background` runs it alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.transcripts import write_transcript

MB = 1_000_000


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process and its descendants so far (seconds)."""
    ticks = 0
    for each in procs.process_tree(pid):
        try:
            with open(f"/proc/{each}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def _indexing_started(pids: tuple[int, ...], seconds: float = 15.0) -> None:
    """Wait until the services spend half a core or more (their pass has begun), or `seconds`."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        was = sum(cpu_seconds(pid) for pid in pids)
        await asyncio.sleep(0.25)
        if sum(cpu_seconds(pid) for pid in pids) - was >= 0.125:
            return


def _hintless(ref: ref_pb2.MediaRef) -> ref_pb2.MediaRef:
    copy = ref_pb2.MediaRef()
    copy.CopyFrom(ref)
    copy.ClearField("line_offset_hint")
    return copy


async def _samples(
    media: media_pb2_grpc.MediaServiceAsyncStub,
    floor: media_pb2_grpc.MediaServiceAsyncStub,
    photos: list[ref_pb2.MediaRef],
    repeats: int,
    batch: int,
) -> dict[str, float]:
    def case(stub: media_pb2_grpc.MediaServiceAsyncStub) -> services.TimedCase:
        async def run(round_number: int) -> float | None:
            ref = photos[round_number % len(photos)]
            return await services.timed(lambda: services.drain_media(stub, ref), batch)

        return run

    return await services.interleave({"real": case(media), "floor": case(floor)}, repeats)


async def measure(
    work: Path,
    log: Callable[[str], None],
    *,
    big_bytes: int,
    image_bytes: int,
    repeats: int,
    batch: int,
) -> list[Figure]:
    """The `media_read_during_indexing` figure, over servers of its own."""
    root = work / "bg-root"
    write_transcript(root / "bench" / "photo.jsonl", 4 * MB, image_bytes=1_300_000)
    # Written outside the root, then moved in: the servers never saw it before.
    fresh = work / "bg-fresh.jsonl"
    write_transcript(fresh, big_bytes, image_bytes=image_bytes, session_id="fresh")  # type: ignore[arg-type]
    async with (
        procs.history_server(root, work / "bg-state-history", search_indexing=True) as history_proc,
        procs.media_server(root, work / "bg-state-media") as media_proc,
        services.channel(history_proc.addr) as history_channel,
        services.channel(media_proc.addr) as media_channel,
    ):
        history = history_pb2_grpc.HistoryServiceStub(history_channel)
        media = media_pb2_grpc.MediaServiceStub(media_channel)
        photos = (await services.read_window(history, "photo")).refs
        _metadata, image = await services.read_media(media, photos[0])
        (work / "bg-image.bin").write_bytes(image)
        async with (
            procs.floor_server(work / "bg-image.bin", None) as floor_proc,
            services.channel(floor_proc.addr) as floor_channel,
        ):
            floor = media_pb2_grpc.MediaServiceStub(floor_channel)
            for ref in photos:
                await services.drain_media(media, ref)
                await services.drain_media(floor, ref)
            servers = (history_proc.pid, media_proc.pid)
            idle = await _samples(media, floor, photos, repeats, batch)
            os.rename(fresh, root / "bench" / "fresh.jsonl")
            window = await services.read_window(history, "fresh")
            if window.refs:
                await services.drain_media(media, _hintless(window.refs[0]))
            await _indexing_started(servers)
            # The CPU the two services spent while the reads were timed: the pass's work.
            before = [cpu_seconds(pid) for pid in servers]
            started = time.perf_counter()
            during = await _samples(media, floor, photos, repeats, batch)
            spent = [cpu_seconds(pid) - was for pid, was in zip(servers, before, strict=True)]
            elapsed = time.perf_counter() - started
    log(
        f"ReadMedia idle {idle['real'] * 1e3:.2f} ms (floor {idle['floor'] * 1e3:.2f}), during "
        f"indexing {during['real'] * 1e3:.2f} ms (floor {during['floor'] * 1e3:.2f}); in those "
        f"{elapsed:.1f} s history used {spent[0]:.1f} s CPU, media {spent[1]:.1f} s"
    )
    return [
        Figure(
            key="media_read_during_indexing",
            name=f"ReadMedia of a {len(image) / MB:.1f} MB photo while the services index a "
            f"freshly seen {big_bytes / MB:,.0f} MB transcript vs the same idle",
            figure=during["real"] * 1e3,
            baseline=idle["real"] * 1e3,
            unit="ms",
            baseline_label="idle",
            ratio=during["real"] / idle["real"],
            target=Target("<=", 1.2),
            note=f"the floor server: {during['floor'] * 1e3:.2f} ms during, "
            f"{idle['floor'] * 1e3:.2f} ms idle",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.background [--big-mb N] [--repeats N]`: this figure alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--big-mb", type=float, default=300.0, help="the fresh transcript, MB")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats (15)")
    parser.add_argument("--batch", type=int, default=5, help="photos per sample (5)")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback reads during indexing bench",
        lambda work, log: measure(
            work,
            log,
            big_bytes=int(args.big_mb * MB),
            image_bytes=20_000,
            repeats=args.repeats,
            batch=args.batch,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
