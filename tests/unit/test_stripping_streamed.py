"""`strip_line_streamed` (lines too large to hold) gives exactly what `strip_line` gives.

Every generated transcript line of the contract's property test is stripped
both ways, the streamed one through a reader that hands out small chunks, so
every token boundary (quotes, backslash runs, escapes, key colons) falls
across a chunk somewhere.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    strip_line,
    strip_line_streamed,
)
from scrollback.contract.top_level import TOP_LEVEL_WINDOW
from tests.unit.test_stripping_property import line_and_sizes


def _reader(line: bytes, reads: list[int]) -> Any:
    def read(offset: int, length: int) -> bytes:
        assert offset >= 0 and offset + length <= len(line), "reads stay inside the line"
        reads.append(length)
        return line[offset : offset + length]

    return read


def _same(line: bytes, limit: int, max_line_size: int, chunk: int) -> None:
    reads: list[int] = []
    streamed = strip_line_streamed(
        _reader(line, reads), len(line), limit, max_line_size, chunk_size=chunk
    )
    whole = strip_line(line, limit, max_line_size)
    assert (streamed is None) == (whole is None)
    if streamed is not None and whole is not None:
        assert streamed == whole
    # Each read of the streaming passes is bounded by the chunk; only kept text
    # (which is at most max_line_size) is read in larger pieces, and the oversize
    # stub reads the line's two ends, each at most TOP_LEVEL_WINDOW.
    assert all(length <= max(chunk, max_line_size, TOP_LEVEL_WINDOW) for length in reads)


@given(case=line_and_sizes(MIN_INLINE_LIMIT), chunk=st.integers(1, 700))
@settings(
    max_examples=max(20, settings.default.max_examples // 4),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def test_streamed_equals_whole(case: tuple[bytes, int], chunk: int) -> None:
    line, max_line_size = case
    _same(line, MIN_INLINE_LIMIT, max_line_size, chunk)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"[1,2]",
        b'{"a":"' + b"QUJD" * 400 + b'"',  # unterminated
        b'{"k\\\\":"' + b"QUJD" * 400 + b'"}',  # an escaped backslash ends the key
        b'{"t":"\\"' + b"QUJD" * 400 + b'\\""}',  # escaped quotes around base64: prose
        b'{"' + b"QUJD" * 400 + b'" : 1}',  # a long base64 key
        b'{"d":"' + b"QUJD" * 300 + b"\\u0041\\/" + b"QUJD" * 100 + b'"}',
    ],
)
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 64])
def test_streamed_equals_whole_on_hard_cases(line: bytes, chunk: int) -> None:
    _same(line, MIN_INLINE_LIMIT, 1 << 20, chunk)
