"""First touch in any order: hintless refs anywhere in a never-seen large transcript vs a 5 MB one.

A viewer of a session nobody opened before jumps around it: the first image,
the last, the middle, in whatever order. Four hintless refs per file (its
first image, the ones a third and two thirds in, its last) are read in one of
ORDERS orders (seeded permutations), one after the other, by time to first
byte, on a fresh media server with a fresh state (the file never seen: no
line index, no cached lookup), for the large file and for the 5 MB one. Per
order, the large file's total against the small one's; the figure is the
worst order's ratio (the target holds in any order), the median order's is
in the note.

`python -m scrollback_app.bench.first_touch` runs it alone.
"""

from __future__ import annotations

import itertools
import random
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.line_index import bare_refs
from scrollback_app.bench.transcripts import write_transcript

MB = 1_000_000
ORDERS = 8
SEED = 46


def spread_refs(path: Path, session_id: str) -> list[ref_pb2.MediaRef]:
    """Hintless refs to the file's first image, the ones a third and two thirds in, its last."""
    refs = bare_refs(path, session_id, 0, 1 << 30)
    count = len(refs)
    return [refs[0], refs[count // 3], refs[2 * count // 3], refs[-1]]


async def _read_in_order(
    root: Path, state: Path, refs: list[ref_pb2.MediaRef], order: tuple[int, ...]
) -> float:
    """Seconds of the refs' times to first byte, read in `order` on a fresh server and state."""
    try:
        async with (
            procs.media_server(root, state) as server,
            services.channel(server.addr) as channel,
        ):
            stub = media_pb2_grpc.MediaServiceStub(channel)
            total = 0.0
            for position in order:
                total += await services.media_ttfb(stub, refs[position])
            return total
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def measure(
    work: Path,
    log: Callable[[str], None],
    *,
    big_bytes: int,
    small_bytes: int,
    image_bytes: int,
    orders: int = ORDERS,
) -> list[Figure]:
    """The `first_touch_any_order` figure, on transcripts written under `work`."""
    root = work / "touch-root"
    project = root / "bench"
    chosen = random.Random(SEED).sample(list(itertools.permutations(range(4))), orders)
    totals: dict[str, list[float]] = {"big": [], "small": []}
    sizes: dict[str, int] = {}
    for number, order in enumerate(chosen):
        for name, size in (("big", big_bytes), ("small", small_bytes)):
            # A copy of its own per order: another inode, so nothing of an earlier order holds.
            session = f"{name}-{number}"
            path = project / f"{session}.jsonl"
            if number == 0:
                write_transcript(path, size, image_bytes=image_bytes, session_id=name)  # type: ignore[arg-type]
            else:
                shutil.copyfile(project / f"{name}-0.jsonl", path)
            sizes[name] = path.stat().st_size
            refs = spread_refs(path, session)
            state = work / f"touch-state-{session}"
            totals[name].append(await _read_in_order(root, state, refs, order))
            if number:
                path.unlink()
    ratios = [big / small for big, small in zip(totals["big"], totals["small"], strict=True)]
    worst, median = max(ratios), statistics.median(ratios)
    big_label, small_label = f"{sizes['big'] / MB:,.0f} MB", f"{sizes['small'] / MB:,.1f} MB"
    log(f"first touch in any order: ratios {', '.join(f'{r:.2f}' for r in ratios)}")
    return [
        Figure(
            key="first_touch_any_order",
            name=f"four hintless refs (first, a third in, two thirds in, last image) read in "
            f"any of {orders} orders on a fresh server and state, never-seen {big_label} vs "
            f"{small_label}, time to first byte summed: the worst order",
            figure=statistics.median(totals["big"]) * 1e3,
            baseline=statistics.median(totals["small"]) * 1e3,
            unit="ms",
            baseline_label=small_label,
            ratio=worst,
            target=Target("<=", 2.0),
            note=f"ratio = the worst order's; the median order's: {median:.2f}x; "
            "figure and baseline: the median totals",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.first_touch [--big-mb N]`: this figure alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--big-mb", type=float, default=300.0, help="the large transcript, MB")
    parser.add_argument("--small-mb", type=float, default=5.0, help="the small transcript, MB")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback first touch in any order bench",
        lambda work, log: measure(
            work,
            log,
            big_bytes=int(args.big_mb * MB),
            small_bytes=int(args.small_mb * MB),
            image_bytes=750_000,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
