"""Micro benchmarks (pytest-benchmark) of the hot paths behind the figures.

Each case runs a few rounds only, so the suite stays quick; compare runs with
`pytest tests/bench --benchmark-only --benchmark-autosave`. Results are
checked for correctness, never for speed: benchmarks are not timed tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from media_service.uuid_scan import iter_candidate_lines
from scrollback.contract.stripping import DEFAULT_MAX_LINE_SIZE
from scrollback.linefile import LocalSource
from scrollback_app.bench.services import naive_latest
from scrollback_app.bench.stripper import check_and_pin, newline_scan, payloads_of, strip_lines
from scrollback_app.bench.transcripts import transcript_lines, write_transcript

ROUNDS = 5
T = TypeVar("T")


def measure(benchmark: BenchmarkFixture, function: Callable[..., T], *args: Any) -> T:
    """A few rounds of `function(*args)` (pytest-benchmark's pedantic mode)."""
    return cast(T, benchmark.pedantic(function, args=args, rounds=ROUNDS))  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def image_lines() -> list[bytes]:
    """Eight lines, two of them with a ~1 MB base64 image (newlines removed)."""
    return [line[:-1] for line in transcript_lines(8, image_bytes=750_000)]


@pytest.fixture(scope="module")
def transcript(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~6 MB image-heavy transcript."""
    path = tmp_path_factory.mktemp("micro") / "micro.jsonl"
    write_transcript(path, 6_000_000, image_bytes=750_000)
    return path


def test_strip_image_lines(benchmark: BenchmarkFixture, image_lines: list[bytes]) -> None:
    images = measure(benchmark, strip_lines, image_lines)
    assert images == 2


def test_check_and_pin_image_lines(benchmark: BenchmarkFixture, image_lines: list[bytes]) -> None:
    # The stripper's ceiling checks and pins exactly the payloads the stripper cuts.
    assert measure(benchmark, check_and_pin, payloads_of(image_lines)) == 2


def test_newline_scan_floor(benchmark: BenchmarkFixture, image_lines: list[bytes]) -> None:
    buffer = b"\n".join(image_lines) + b"\n"
    assert measure(benchmark, newline_scan, buffer) == len(image_lines)


def test_naive_reader_baseline(benchmark: BenchmarkFixture, transcript: Path) -> None:
    entries = measure(benchmark, naive_latest, transcript)
    assert 0 < len(entries) <= 200
    assert entries[-1]["type"] in {"user", "assistant"}


def test_media_uuid_scan_to_last_line(benchmark: BenchmarkFixture, transcript: Path) -> None:
    """The cold ReadMedia path: the forward uuid scan down to the file's last entry."""
    last = naive_latest(transcript, 1)[0]["uuid"]

    def scan() -> int:
        fd = os.open(transcript, os.O_RDONLY)
        try:
            return sum(
                1 for _ in iter_candidate_lines(LocalSource(fd), last, DEFAULT_MAX_LINE_SIZE)
            )
        finally:
            os.close(fd)

    assert measure(benchmark, scan) == 1
