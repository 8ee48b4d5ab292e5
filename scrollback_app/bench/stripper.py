"""Stripper throughput against its floor: a bare newline scan of the same bytes.

Both run over the same in-memory image-heavy lines, interleaved, and the
median of the repeats is compared. The stripper is handed the lines one by
one, as the history reader hands it each line it read; the floor finds every
line end in the same bytes joined into one buffer.

Beside them, interleaved too, runs the part of the stripper's work the contract
fixes and libraries do: each payload's check (one byte-set scan,
`first_not_base64`) and its pin (xxh3-128, `pin_of`), with nothing else. Its
ratio to the newline scan is the most the stripper could reach on the machine
at hand (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from scrollback.contract.payload_scan import first_not_base64
from scrollback.contract.stripping import (
    DEFAULT_INLINE_LIMIT,
    find_payload_spans,
    pin_of,
    strip_line,
)
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


# A payload as the stripper meets it: its line, and the raw text's start and end.
Payload = tuple[bytes, int, int]


def payloads_of(lines: list[bytes], inline_limit: int = DEFAULT_INLINE_LIMIT) -> list[Payload]:
    """Every payload of the lines, found once (untimed) for `check_and_pin`."""
    return [
        (line, start, end)
        for line in lines
        for start, end in find_payload_spans(line, inline_limit)
    ]


def check_and_pin(payloads: list[Payload]) -> int:
    """Only the payloads' check and pin, as the stripper's libraries run them; the count pinned."""
    pinned = 0
    for line, start, end in payloads:
        if first_not_base64(line, start, end) < 0:
            with memoryview(line) as view:
                pin_of(view[start:end])
            pinned += 1
    return pinned


def _time_runs(function: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return samples


@dataclass(frozen=True)
class StripperResult:
    """The stripper, and its payloads' check and pin alone, each against the newline scan."""

    stripper: RatioResult
    check_and_pin: RatioResult


def measure(
    total_bytes: int = 64 << 20, image_bytes: int = 750_000, repeats: int = 7
) -> StripperResult:
    """Stripper MB/s (and its check and pin alone) vs newline-scan MB/s over the same lines."""
    lines: list[bytes] = []
    size = 0
    for line in transcript_lines(1 << 30, image_bytes=image_bytes):
        lines.append(line[:-1])
        size += len(line)
        if size >= total_bytes:
            break
    buffer = b"\n".join(lines) + b"\n"
    payloads = payloads_of(lines)
    strip_samples: list[float] = []
    scan_samples: list[float] = []
    kernel_samples: list[float] = []
    for _ in range(repeats):  # interleaved: all see the same machine state
        scan_samples += _time_runs(lambda: newline_scan(buffer), 1)
        strip_samples += _time_runs(lambda: strip_lines(lines), 1)
        kernel_samples += _time_runs(lambda: check_and_pin(payloads), 1)
    megabytes = len(buffer) / 1e6
    strip_rate = megabytes / statistics.median(strip_samples)
    scan_rate = megabytes / statistics.median(scan_samples)
    kernel_rate = megabytes / statistics.median(kernel_samples)
    return StripperResult(
        stripper=_beside_scan(
            "stripper throughput vs newline scan", strip_rate, scan_rate, "(reported)"
        ),
        check_and_pin=_beside_scan(
            "payload check and pin alone vs newline scan",
            kernel_rate,
            scan_rate,
            "(reported: the stripper's ceiling)",
        ),
    )


def _beside_scan(name: str, rate: float, scan_rate: float, target: str) -> RatioResult:
    """A rate in MB/s beside the newline scan's."""
    return RatioResult(
        name=name,
        figure=rate,
        baseline=scan_rate,
        unit="MB/s",
        target=target,
        ratio=rate / scan_rate,
    )


if __name__ == "__main__":
    measured = measure()
    for result in (measured.stripper, measured.check_and_pin):
        print(
            f"{result.name}: {result.figure:,.0f} {result.unit} vs {result.baseline:,.0f}"
            f" {result.unit} = {result.ratio:.2f} (target {result.target})"
        )
