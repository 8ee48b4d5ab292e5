"""Slim downscale memory figure: the history server's peak PSS while it downscales a 64 MP PNG.

A fresh `python -m history_service` serves a session of one line holding a
one-colour 8000x8000 RGBA PNG (a quarter of a megabyte: the pixels compress to
almost nothing, 256 MB once decoded whole), pasted as an image block. Its
baseline is its PSS (summed over its processes) idle after one small slim
downscale (so the decode path is loaded); the figure is the peak of that sum,
sampled while SlimSession with `images=downscale` copies the large one. The
target is growth over idle under +150 MB: the image is shrunk while it is
decoded, never held whole, under the worker's decode budget.

`python -m scrollback_app.bench.slim_downscale` runs this figure alone; the
integration tests reuse `slim_downscale_growth`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import orjson

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.idle import tree_pss_kib
from scrollback_app.bench.peak_pss import PeakPss
from scrollback_app.bench.thumbnails import flat_png

MB = 1_000_000
SIDE = 8000  # 64 MP, the largest image a downscale decodes
GROWTH_MAX_MB = 150
PROJECT = "-bench-downscale"
WARM = "downscale-warm"
LARGE = "downscale-64mp"


def image_line(uuid: str, png: bytes) -> bytes:
    """A user entry pasting `png` as an image block, newline included."""
    block = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png).decode("ascii"),
        },
    }
    entry = {
        "type": "user",
        "uuid": uuid,
        "parentUuid": None,
        "sessionId": uuid,
        "message": {"role": "user", "content": [{"type": "text", "text": "look"}, block]},
    }
    return orjson.dumps(entry) + b"\n"


def write_sessions(root: Path, side: int = SIDE) -> int:
    """The warm-up session and the large one under `root`; the large PNG's size."""
    project = root / PROJECT
    project.mkdir(parents=True, exist_ok=True)
    (project / f"{WARM}.jsonl").write_bytes(image_line(WARM, flat_png(2400, 1600, (9, 9, 9, 128))))
    large = flat_png(side, side, (10, 200, 30, 255))
    (project / f"{LARGE}.jsonl").write_bytes(image_line(LARGE, large))
    return len(large)


async def slim_downscale(
    stub: history_pb2_grpc.HistoryServiceAsyncStub, session_id: str
) -> tuple[bytes, history_pb2.SlimFileEnd]:
    """SlimSession of `session_id` with images downscaled: the copy and its file end."""
    request = history_pb2.SlimSessionRequest(
        session_id=session_id, images=history_pb2.SLIM_IMAGES_DOWNSCALE
    )
    copy = bytearray()
    end = history_pb2.SlimFileEnd()
    async for message in stub.SlimSession(request, timeout=600):
        if message.HasField("data"):
            copy += message.data
        elif message.HasField("file_end"):
            end = message.file_end
    return bytes(copy), end


async def slim_downscale_growth(
    server: procs.ServerProcess, stub: history_pb2_grpc.HistoryServiceAsyncStub
) -> tuple[float, float, bytes, history_pb2.SlimFileEnd]:
    """Idle PSS (MB) after the warm-up, peak PSS (MB) during the large downscale, its copy."""
    await slim_downscale(stub, WARM)
    idle = tree_pss_kib(server.pid)[0] * 1024 / MB
    with PeakPss(server.pid) as peak:
        copy, end = await slim_downscale(stub, LARGE)
    return idle, peak.kib * 1024 / MB, copy, end


async def measure(work: Path, log: Callable[[str], None]) -> list[Figure]:
    """The figure, from a fresh history server under `work`."""
    root = work / "downscale-root"
    size = write_sessions(root)
    server = procs.history_server(root, work / "state-downscale")
    async with server, services.channel(server.addr) as channel:
        stub: history_pb2_grpc.HistoryServiceAsyncStub = history_pb2_grpc.HistoryServiceStub(
            channel
        )
        idle, peak, _copy, end = await slim_downscale_growth(server, stub)
        workers = server.worker_count()
    log(f"slim downscale: idle {idle:.0f} MB PSS, peak {peak:.0f} MB during a 64 MP PNG")
    return [
        Figure(
            key="slim_downscale_pss_64mp",
            name=f"history service peak PSS (summed over the parent and {workers} workers) "
            f"during SlimSession images=downscale of a {SIDE}x{SIDE} RGBA PNG "
            f"({size / MB:.2f} MB), vs the same idle",
            figure=peak,
            baseline=idle,
            unit="MB",
            baseline_label="idle",
            ratio=peak / idle,
            target=Target(figure_max=round(idle + GROWTH_MAX_MB)),
            note=f"target: growth under +{GROWTH_MAX_MB} MB over idle; "
            f"{end.images_downscaled} downscaled, {end.images_replaced} cut",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.slim_downscale`: this figure alone."""
    from scrollback_app.bench.figures import run_alone

    del argv
    return run_alone("scrollback slim downscale bench", measure)


if __name__ == "__main__":
    raise SystemExit(main())
