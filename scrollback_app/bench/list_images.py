"""ListImages memory figure: a history server's PSS while it lists a 2,000,000-line session.

The session (`write_chain_session`) is one long conversation of small lines,
user and assistant in turn, each the child of the line before, with a pasted
image every `IMAGE_EVERY` lines: its numbering follows a chain as long as the
file. The figure is the peak PSS summed over a fresh `python -m
history_service` subprocess tree (sampled every `SAMPLE_SECONDS` while the
stream runs), beside the same tree idle after a small ListImages. Target:
growth under +100 MB, since the numbering holds the chain's offsets (a few
bytes per line), never a record per line.

`peak_pss_during` is shared with the test that keeps this bound.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.idle import tree_pss_kib

MB = 1_000_000
PROJECT = "images"
SESSION = "images-session"
LINES = 2_000_000
IMAGE_EVERY = 100_000
GROWTH_MAX_MB = 100
SAMPLE_SECONDS = 0.02
# Lines written per block of the generator: one template, its uuids told apart by the block's number.
_BLOCK_LINES = 10_000
_PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d4944415478da63f8cfc0f01f0005000201ad5ee8f80000000049454e44ae426082"
    )
)
T = TypeVar("T")


def _uuid(block: bytes, line: int) -> bytes:
    return b"%s-%04d-4000-8000-000000000000" % (block, line)


def _block_template(image_every: int) -> bytes:
    """A block's lines with `@@@@@@@@` for its number and `########` for the previous block's
    (an image every `image_every` lines, none for 0)."""
    lines = []
    for k in range(_BLOCK_LINES):
        uuid = _uuid(b"@@@@@@@@", k)
        parent = _uuid(b"@@@@@@@@", k - 1) if k else _uuid(b"########", _BLOCK_LINES - 1)
        if image_every and (k + 1) % image_every == 0:
            content = (
                b'[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64",'
                b'"media_type":"image/png","data":"' + _PNG + b'"}}]'
            )
            kind = b"user"
        elif k % 2:
            content, kind = b'[{"type":"text","text":"ok"}]', b"assistant"
        else:
            content, kind = b'"hi"', b"user"
        lines.append(
            b'{"type":"%s","uuid":"%s","parentUuid":"%s","sessionId":"s","message":'
            b'{"role":"%s","content":%s}}\n' % (kind, uuid, parent, kind, content)
        )
    return b"".join(lines)


def write_chain_session(path: Path, lines: int = LINES, image_every: int = IMAGE_EVERY) -> int:
    """A session of `lines` (a multiple of 10,000) chained lines; the bytes written."""
    plain = _block_template(0)
    imaged = _block_template(min(image_every, _BLOCK_LINES))
    blocks_per_image = max(1, image_every // _BLOCK_LINES)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with path.open("wb") as handle:
        for block in range(lines // _BLOCK_LINES):
            text = imaged if (block + 1) % blocks_per_image == 0 else plain
            if block == 0:  # the first line has no parent in the file
                text = text.replace(_uuid(b"########", _BLOCK_LINES - 1), b"none", 1)
            text = text.replace(b"########", b"%08x" % (block - 1)).replace(
                b"@@@@@@@@", b"%08x" % block
            )
            handle.write(text)
            written += len(text)
    return written


async def peak_pss_during(pid: int, work: Awaitable[T]) -> tuple[T, int]:
    """`work`'s result and the peak PSS (KiB) of `pid`'s process tree while it ran."""
    stop = threading.Event()
    peak = 0

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_pss_kib(pid)[0])
            stop.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, name="pss-sampler", daemon=True)
    sampler.start()
    try:
        result = await work
    finally:
        stop.set()
        await asyncio.to_thread(sampler.join)
    return result, max(peak, tree_pss_kib(pid)[0])


async def list_images(
    stub: history_pb2_grpc.HistoryServiceAsyncStub, session_id: str
) -> list[history_pb2.ListImagesResponse]:
    """The messages of one ListImages stream."""
    request = history_pb2.ListImagesRequest(session_id=session_id)
    return [message async for message in stub.ListImages(request, timeout=600)]


async def measure(work: Path, log: Callable[[str], None], lines: int = LINES) -> list[Figure]:
    """The figure, from a fresh history server over a generated session under `work`."""
    root = work / "images-root"
    written = write_chain_session(root / PROJECT / f"{SESSION}.jsonl", lines)
    write_chain_session(root / PROJECT / "warm.jsonl", _BLOCK_LINES, 1000)
    log(f"list images: {lines:,} lines, {written / MB:,.0f} MB")
    async with (
        procs.history_server(root, work / "state-images") as server,
        services.channel(server.addr) as channel,
    ):
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        await list_images(stub, "warm")
        idle = tree_pss_kib(server.pid)[0] * 1024 / MB
        started = time.perf_counter()
        messages, peak_kib = await peak_pss_during(server.pid, list_images(stub, SESSION))
        seconds = time.perf_counter() - started
    peak = peak_kib * 1024 / MB
    images = len(messages) - 1
    log(f"list images: idle {idle:.0f} MB, peak {peak:.0f} MB PSS, {seconds:.1f} s")
    return [
        Figure(
            key="list_images_pss",
            name=f"history server peak PSS (summed over its processes) during ListImages of a "
            f"{lines:,}-line session ({written / MB:,.0f} MB, {images} images), vs the same idle",
            figure=peak,
            baseline=idle,
            unit="MB",
            baseline_label="idle",
            ratio=peak / idle,
            target=Target(figure_max=round(idle + GROWTH_MAX_MB)),
            note=f"target: growth under +{GROWTH_MAX_MB} MB over idle; {seconds:.1f} s",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.list_images [--lines N]`: this figure alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=LINES, help="lines of session (2,000,000)")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback list images bench", lambda work, log: measure(work, log, args.lines)
    )


if __name__ == "__main__":
    raise SystemExit(main())
