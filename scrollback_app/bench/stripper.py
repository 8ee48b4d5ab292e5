"""Stripper throughput against its floor: a bare newline scan of the same bytes.

Both run over the same in-memory image-heavy lines, interleaved, and the
median of the repeats is compared. The stripper is handed the lines one by
one, as the history reader hands it each line it read; the floor finds every
line end in the same bytes joined into one buffer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from scrollback.contract.stripping import DEFAULT_INLINE_LIMIT, strip_line
from scrollback_app.bench.transcripts import transcript_lines


@dataclass(frozen=True)
class RatioResult:
    """A measured figure beside its baseline."""

    name: str
    figure: float
    baseline: float
    unit: str
    target: str
    ratio: float


def newline_scan(buffer: bytes) -> int:
    """The floor: find every line end with bytes.find."""
    count = 0
    position = 0
    find = buffer.find
    while True:
        end = find(b"\n", position)
        if end < 0:
            return count
        count += 1
        position = end + 1


def strip_lines(lines: list[bytes], inline_limit: int = DEFAULT_INLINE_LIMIT) -> int:
    """Strip each line; return the number of images cut."""
    images = 0
    for line in lines:
        stripped = strip_line(line, inline_limit)
        if stripped is not None:
            images += len(stripped.images)
    return images


def _time_runs(function: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return samples


def measure(
    total_bytes: int = 64 << 20, image_bytes: int = 750_000, repeats: int = 7
) -> RatioResult:
    """Stripper MB/s vs newline-scan MB/s over the same image-heavy buffer."""
    lines: list[bytes] = []
    size = 0
    for line in transcript_lines(1 << 30, image_bytes=image_bytes):
        lines.append(line[:-1])
        size += len(line)
        if size >= total_bytes:
            break
    buffer = b"\n".join(lines) + b"\n"
    strip_samples: list[float] = []
    scan_samples: list[float] = []
    for _ in range(repeats):  # interleaved: both see the same machine state
        scan_samples += _time_runs(lambda: newline_scan(buffer), 1)
        strip_samples += _time_runs(lambda: strip_lines(lines), 1)
    megabytes = len(buffer) / 1e6
    strip_rate = megabytes / statistics.median(strip_samples)
    scan_rate = megabytes / statistics.median(scan_samples)
    return RatioResult(
        name="stripper throughput vs newline scan",
        figure=strip_rate,
        baseline=scan_rate,
        unit="MB/s",
        target=">= 0.4",
        ratio=strip_rate / scan_rate,
    )


if __name__ == "__main__":
    result = measure()
    print(
        f"{result.name}: {result.figure:,.0f} {result.unit} vs {result.baseline:,.0f} {result.unit}"
        f" = {result.ratio:.2f} (target {result.target})"
    )
