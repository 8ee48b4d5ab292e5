"""Line index figures: hintless refs at any depth, and the index's build speed.

- **Build on first touch**: the persisted line index (scrollback.lineindex) of
  the big transcript built into a fresh SQLite state database, vs a bare
  `bytes.find` newline scan of the same page-cached file (target >= 0.25x of
  its throughput).
- **Hintless ref, first read after a restart**: a ref rebuilt from its string
  form (no `line_offset_hint`) to an image past the middle of the big
  transcript vs the first image of a 5 MB one, time to first byte, on a media
  server restarted after both files were indexed (index persisted, offset
  cache empty): target <= 1.5x.
- **The same, repeated** (the refs resolved before): target <= 1.2x.
- **First touch**: a hintless ref to the first image (near line 1) of the big
  transcript vs the same of the 5 MB one, each on a fresh media server with a
  fresh state (the file never seen, no line index), time to first byte:
  target <= 2x (a lookup costs O(the entry's position), the index is built in
  the background).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from scrollback.contract.stripping import strip_line
from scrollback.linefile import LocalSource
from scrollback.lineindex import LineIndex
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback.state.line_index_sqlite import SqliteLineIndexStore
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.transcripts import write_transcript

MB = 1_000_000
SCAN_BLOCK = 8 * 1024 * 1024


def newline_scan(path: Path) -> int:
    """The floor: read the file in blocks and find every line end with `bytes.find`."""
    block = bytearray(SCAN_BLOCK)
    view = memoryview(block)
    count = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        while True:
            read = os.preadv(fd, [view], position)
            if read == 0:
                return count
            found = block.find(b"\n", 0, read)
            while found >= 0:
                count += 1
                found = block.find(b"\n", found + 1, read)
            position += read
    finally:
        view.release()
        os.close(fd)


def build_index(path: Path, scratch: Path) -> float:
    """Seconds to index the file into a fresh state database."""
    state = Path(tempfile.mkdtemp(dir=scratch))
    store = SqliteLineIndexStore(state)
    try:
        with LocalSource(os.open(path, os.O_RDONLY)) as source:
            start = time.perf_counter()
            LineIndex(store).ensure("bench/big.jsonl", source)
            return time.perf_counter() - start
    finally:
        store.close()
        shutil.rmtree(state, ignore_errors=True)


def bare_refs(path: Path, session_id: str, start: int, count: int) -> list[ref_pb2.MediaRef]:
    """Refs (no hint) to the first image of `count` image entries from byte `start` on."""
    refs: list[ref_pb2.MediaRef] = []
    with open(path, "rb") as handle:
        handle.seek(start)
        if start:
            handle.readline()  # the rest of a line cut by `start`
        for line in handle:
            stripped = strip_line(line.rstrip(b"\n"))
            if stripped is None or not stripped.images or not stripped.uuid:
                continue
            image = stripped.images[0]
            refs.append(
                ref_pb2.MediaRef(
                    session_id=session_id,
                    entry_uuid=stripped.uuid,
                    index=image.index,
                    pin=image.pin,
                )
            )
            if len(refs) == count:
                break
    return refs


async def measure(
    work: Path,
    *,
    big_bytes: int,
    small_bytes: int,
    image_bytes: int,
    repeats: int,
    batch: int,
    log: Callable[[str], None],
) -> list[Figure]:
    """The three figures, on transcripts written under `work`."""
    root = work / "index-root"
    project = root / "bench"
    big = project / "big.jsonl"
    write_transcript(big, big_bytes, image_bytes=image_bytes, session_id="big")  # type: ignore[arg-type]
    small = project / "small-0.jsonl"
    write_transcript(small, small_bytes, image_bytes=image_bytes, session_id="small")  # type: ignore[arg-type]
    for number in range(1, repeats):
        shutil.copyfile(small, project / f"small-{number}.jsonl")
    big_size = big.stat().st_size
    big_label, small_label = f"{big_size / MB:,.0f} MB", f"{small.stat().st_size / MB:,.0f} MB"
    log(f"line index: {big_label} and {repeats} x {small_label} transcripts")
    figures = [_build_figure(big, work, big_label, repeats)]
    deep = bare_refs(big, "big", big_size // 2, repeats)
    first = bare_refs(small, "small-0", 0, 1)[0]
    shallow = [ref_pb2.MediaRef() for _ in range(repeats)]
    for number, ref in enumerate(shallow):
        ref.CopyFrom(first)
        ref.session_id = f"small-{number}"
    figures.append(
        await _first_touch_figure(root, big, small, work, big_label, small_label, repeats)
    )
    state = work / "state-index"
    # Index every file once (one StatMedia), then restart: the index persists.
    async with procs.media_server(root, state) as server, services.channel(server.addr) as ch:
        stub = media_pb2_grpc.MediaServiceStub(ch)
        selectors = [media_pb2.MediaSelector(media_ref=ref) for ref in (*deep[:1], *shallow)]
        await stub.StatMedia(media_pb2.StatMediaRequest(media=selectors))
    async with procs.media_server(root, state) as server, services.channel(server.addr) as ch:
        stub = media_pb2_grpc.MediaServiceStub(ch)

        def cold(refs: list[ref_pb2.MediaRef]) -> services.TimedCase:
            async def run(round_number: int) -> float | None:
                return await services.media_ttfb(stub, refs[round_number % len(refs)])

            return run

        rounds = min(repeats, len(deep))
        medians = await services.interleave({"big": cold(deep), "small": cold(shallow)}, rounds)
        figures.append(
            _ttfb_figure(
                "index_hintless_after_restart",
                f"ReadMedia time to first byte, hintless ref to an image past the middle of "
                f"{big_label} vs the first image of {small_label}, first read after a restart",
                medians,
                small_label,
                Target("<=", 1.5),
                "index persisted in the state database; the offset cache empty",
            )
        )

        def warm(ref: ref_pb2.MediaRef) -> services.TimedCase:
            async def run(_round: int) -> float | None:
                return await services.timed(lambda: services.media_ttfb(stub, ref), batch)

            return run

        medians = await services.interleave({"big": warm(deep[0]), "small": warm(first)}, repeats)
        figures.append(
            _ttfb_figure(
                "index_hintless_repeated",
                f"ReadMedia time to first byte, the same hintless refs repeated, "
                f"{big_label} vs {small_label}",
                medians,
                small_label,
                Target("<=", 1.2),
                "",
            )
        )
    return figures


async def _first_touch_figure(
    root: Path, big: Path, small: Path, work: Path, big_label: str, small_label: str, repeats: int
) -> Figure:
    """The first image of each file, read on a fresh server and state (never seen)."""
    refs = {"big": bare_refs(big, "big", 0, 1)[0], "small": bare_refs(small, "small-0", 0, 1)[0]}
    rounds = 0

    def fresh(name: str) -> services.TimedCase:
        async def run(_round: int) -> float | None:
            nonlocal rounds
            rounds += 1
            state = work / f"state-first-touch-{rounds}"
            try:
                async with (
                    procs.media_server(root, state) as server,
                    services.channel(server.addr) as channel,
                ):
                    stub = media_pb2_grpc.MediaServiceStub(channel)
                    return await services.media_ttfb(stub, refs[name])
            finally:
                shutil.rmtree(state, ignore_errors=True)

        return run

    medians = await services.interleave(
        {"big": fresh("big"), "small": fresh("small")}, max(3, min(repeats, 5))
    )
    return _ttfb_figure(
        "index_first_touch",
        f"ReadMedia time to first byte, hintless ref to the first image of a never-seen "
        f"{big_label} vs of a never-seen {small_label} (fresh server and state)",
        medians,
        small_label,
        Target("<=", 2.0),
        "no line index yet: answered by a search from the start, the index built in the background",
    )


def _build_figure(big: Path, work: Path, label: str, repeats: int) -> Figure:
    newline_scan(big)  # page-cache the file
    scans: list[float] = []
    builds: list[float] = []
    for _ in range(max(3, min(repeats, 5))):
        start = time.perf_counter()
        newline_scan(big)
        scans.append(time.perf_counter() - start)
        builds.append(build_index(big, work))
    scan, build = statistics.median(scans), statistics.median(builds)
    size = big.stat().st_size
    return Figure(
        key="index_build",
        name=f"line index build on first touch of {label} (page-cached) vs a bytes.find "
        "newline scan of the same file",
        figure=size / build / MB,
        baseline=size / scan / MB,
        unit="MB/s",
        baseline_label="newline scan",
        ratio=scan / build,
        target=Target(">=", 0.25),
        note="rows written to a fresh SQLite state database",
    )


def _ttfb_figure(
    key: str, name: str, medians: dict[str, float], small_label: str, target: Target, note: str
) -> Figure:
    return Figure(
        key=key,
        name=name,
        figure=medians["big"] * 1e3,
        baseline=medians["small"] * 1e3,
        unit="ms",
        baseline_label=small_label,
        ratio=medians["big"] / medians["small"],
        target=target,
        note=note,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.line_index [--big-mb N] [--small-mb N]`: these alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--big-mb", type=float, default=1000.0, help="the big transcript (1000)")
    parser.add_argument("--small-mb", type=float, default=5.0, help="the small one (5)")
    parser.add_argument("--image-kb", type=float, default=750.0, help="raw image bytes, KB (750)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats (15)")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback line index bench",
        lambda work, log: measure(
            work,
            big_bytes=int(args.big_mb * MB),
            small_bytes=int(args.small_mb * MB),
            image_bytes=int(args.image_kb * 1000),
            repeats=args.repeats,
            batch=5,
            log=log,
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
