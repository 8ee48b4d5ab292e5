"""Slim copy figures: SlimSession's speed beside a plain copy of the file, and the server's memory.

The session is the insight bench's (`insight.write_session`: prompts,
streamed assistant messages, tool results and a pasted screenshot every
`IMAGE_EVERY` lines), so a large file holds many image lines.

- **Slim copy** (`slim_copy`): a history server subprocess streams the slim
  copy of the whole session over gRPC (SlimSession) and the client writes it
  to a file, in MB/s of the original, beside a plain copy of the same
  page-cached file to a file (`shutil.copyfile`). Reported, no target.
- **Server memory during the copy** (`slim_server_rss`): the history
  server's peak RSS while it streams the copy, beside its RSS before. Target
  <= 1.5x: the copy is streamed line by line, so memory does not grow with
  the session.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.insight import write_session

MB = 1_000_000
PROJECT = "slim"
SESSION = "slim-session"
RSS_TARGET = 1.5


def plain_copy(path: Path, target: Path) -> float:
    """Seconds to copy the file to `target` (the baseline)."""
    started = time.perf_counter()
    shutil.copyfile(path, target)
    return time.perf_counter() - started


async def measure(
    work: Path, session_bytes: int, image_bytes: int, log: Callable[[str], None]
) -> list[Figure]:
    """The slim figures over a generated session of about `session_bytes`."""
    root = work / "slim-root"
    path = root / PROJECT / f"{SESSION}.jsonl"
    written, _messages = write_session(path, session_bytes, image_bytes)
    log(f"slim: {written / MB:,.0f} MB session")
    copies = [plain_copy(path, work / "slim-plain-copy.jsonl") for _ in range(3)]
    copy_rate = written / MB / statistics.median(copies)
    (work / "slim-plain-copy.jsonl").unlink()
    warm = root / PROJECT / "warm.jsonl"
    warm.write_bytes(path.read_bytes()[: 1 * MB].rpartition(b"\n")[0] + b"\n")
    out = work / "slim-copy.jsonl"
    server = procs.history_server(root, work / "state-slim")
    async with server, services.channel(server.addr) as channel:
        history = history_pb2_grpc.HistoryServiceStub(channel)
        async for _ in history.SlimSession(history_pb2.SlimSessionRequest(session_id="warm")):
            pass
        before = server.rss_bytes()
        started = time.perf_counter()
        images = 0
        with out.open("wb") as handle:
            request = history_pb2.SlimSessionRequest(session_id=SESSION)
            async for message in history.SlimSession(request, timeout=3600):
                if message.HasField("data"):
                    handle.write(message.data)
                elif message.HasField("file_end"):
                    images = message.file_end.images_replaced
        seconds = time.perf_counter() - started
        peak = server.peak_rss_bytes()
    slim_size = out.stat().st_size
    out.unlink()
    slim_rate = written / MB / seconds
    log(f"slim: {seconds:.1f} s, {images:,} images cut, {slim_size / MB:,.1f} MB written")
    return [
        Figure(
            key="slim_copy",
            name=f"SlimSession of a {written / MB:,.0f} MB session vs a plain copy",
            figure=slim_rate,
            baseline=copy_rate,
            unit="MB/s",
            baseline_label="plain file copy",
            ratio=slim_rate / copy_rate,
            target=Target(),
            note=f"{images:,} images cut; {slim_size / MB:,.1f} MB written",
        ),
        Figure(
            key="slim_server_rss",
            name=f"history server peak RSS while slimming {written / MB:,.0f} MB",
            figure=peak / MB,
            baseline=before / MB,
            unit="MB",
            baseline_label="RSS before",
            ratio=peak / before,
            target=Target("<=", RSS_TARGET),
            note="streamed line by line",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.slim [--mb N]`: these figures alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=2000.0, help="MB of session (2000)")
    parser.add_argument("--image-kb", type=float, default=750.0, help="raw KB per image (750)")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback slim bench",
        lambda work, log: measure(work, int(args.mb * MB), int(args.image_kb * 1000), log),
    )


if __name__ == "__main__":
    raise SystemExit(main())
