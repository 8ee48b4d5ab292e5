"""The line rules and the line walker checked against a model of a file's lines, for any ByteSource.

tests/unit/test_linefile.py runs them over a local file and a MemorySource;
tests/integration/objectstore/test_line_rules_objects.py over an ObjectSource
of a real SeaweedFS. Each check takes the bytes the source holds and the
source (or a LineFile on it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from hypothesis import strategies as st

from scrollback import linewalk
from scrollback.linefile import ByteSource, LineFile, mark_of
from scrollback.linewalk import KeyLine, LineRun, RawLine, RowReads

# Line bodies: short, with the bytes that matter around newlines (\r, spaces, braces).
BODIES = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x"))
# A few lines longer than a walker's block, among short ones.
LONG_BODIES = st.one_of(
    BODIES, st.integers(min_value=300_000, max_value=600_000).map(lambda n: b"L" * n)
)


def joined(bodies: list[bytes], unterminated: bool) -> bytes:
    """The file of these lines (the last without its newline when `unterminated`)."""
    return b"\n".join(bodies) + (b"" if unterminated or not bodies else b"\n")


def model(data: bytes) -> list[tuple[int, int, bool]]:
    """Every line as (start, length, terminated), newline excluded."""
    lines = []
    start = 0
    while start < len(data):
        newline = data.find(b"\n", start)
        if newline < 0:
            lines.append((start, len(data) - start, False))
            break
        lines.append((start, newline - start, True))
        start = newline + 1
    return lines


def check_line_rules(file: LineFile, data: bytes) -> None:
    """Every single-line rule of LineFile agrees with the model at every offset."""
    lines = model(data)
    starts = {start for start, _, _ in lines}
    for offset in range(-1, len(data) + 2):
        expected = offset == 0 or (0 < offset <= len(data) and data[offset - 1] == 10)
        assert file.starts_line(offset) == expected, offset
    for start, length, terminated in lines:
        body = data[start : start + length]
        assert file.line_at(start, length, terminated=False) == body
        assert file.line_at(start, length) == (body if terminated else None)
        assert file.holds_line(start, length) == terminated
        for wrong in (length - 1, length + 1):
            assert file.line_at(start, wrong, terminated=False) is None
        assert file.line_from(start, 1 << 20) == (body if length or terminated else None)
        assert file.line_from(start, length) == (body if length or terminated else None)
        assert file.line_head(start, length) == (body, terminated)
        if length:
            assert file.line_from(start, length - 1) is None
            assert file.line_head(start, length - 1) == (None, True)
            assert file.line_end(start, length - 1) is None
            assert not file.has_newline(start, length)
        assert file.line_end(start, length) == start + length
        assert file.line_length(start) == length
        if terminated:
            assert file.has_newline(start, length + 1)
            assert RowReads(file.source, [(start, length)]).mark(start, length) == mark_of(
                start, body
            )
        else:
            assert RowReads(file.source, [(start, length)]).mark(start, length) is None
    for offset in range(len(data)):
        if offset not in starts:
            assert file.line_at(offset, 1, terminated=False) is None
            assert file.line_from(offset, 1 << 20) is None
            assert RowReads(file.source, []).mark(offset, 1) is None
    last = lines[-1] if lines else None
    tail = last[0] if last and not last[2] else len(data)
    assert file.tail_start(len(data), 1 << 20) == tail


def _expected(
    data: bytes, max_line: int, start: int = 0
) -> list[tuple[int, int, bytes | None, bool]]:
    return [
        (s, s + n, None if n > max_line else data[s : s + n], t)
        for s, n, t in model(data)
        if s >= start
    ]


def _seen(lines: Iterator[RawLine | object]) -> list[tuple[int, int, bytes | None, bool]]:
    seen = []
    for raw in lines:
        assert isinstance(raw, RawLine)
        seen.append((raw.start, raw.end, raw.data, raw.terminated))
    return seen


def check_walks(source: ByteSource, data: bytes, max_line: int) -> None:
    """Every walk of scrollback.linewalk yields the model's lines, however it gets there."""
    expected = _expected(data, max_line)
    size = len(data)
    assert _seen(linewalk.lines(source, 0, size, max_line)) == expected
    terminated = [line for line in expected if line[3]]
    end = terminated[-1][1] + 1 if terminated else 0
    assert _seen(linewalk.lines_backward(source, end, max_line)) == terminated[::-1]
    rows = [(s, e - s) for s, e, _, t in expected if t and e > s]

    def rows_from(offset: int, limit: int) -> list[tuple[int, int]]:
        return [row for row in rows if row[0] >= offset][:limit]

    def rows_before(offset: int, limit: int) -> list[tuple[int, int]]:
        return [row for row in reversed(rows) if row[0] < offset][:limit]

    # The index leaves blank lines out: they are skipped between rows, and walked by the byte
    # scan past the rows' ends.
    last_end = rows[-1][0] + rows[-1][1] + 1 if rows else 0
    first_start = rows[0][0] if rows else end
    by_rows = [line for line in expected if line[0] < last_end and line[1] > line[0]]
    forward_expected = by_rows + [line for line in expected if line[0] >= last_end]
    backward_expected = [line for line in terminated if line[0] < first_start] + [
        line for line in terminated if line[0] >= first_start and line[1] > line[0]
    ]
    for batch in (1, 3, 208):
        forward = linewalk.indexed(
            source, 0, size, max_line, rows_from, backward=False, batch=batch
        )
        assert _seen(forward) == forward_expected
        backward = linewalk.indexed(
            source, 0, end, max_line, rows_before, backward=True, batch=batch
        )
        assert _seen(backward) == backward_expected[::-1]
    # A wrong row hands over to the byte scan: the same lines, never other bytes.
    wrong_rows = [(0, size + 5)] + ([(rows[0][0], rows[0][1] + 1)] if rows else [])
    for bad in wrong_rows:

        def wrong(offset: int, limit: int, bad: tuple[int, int] = bad) -> list[tuple[int, int]]:
            return [bad, *rows_from(offset, limit)][:limit]

        assert _seen(linewalk.indexed(source, 0, size, max_line, wrong, backward=False)) == expected
    check_runs(source, data, max_line)
    check_find_key(source, data, max_line)


def check_runs(source: ByteSource, data: bytes, max_line: int) -> None:
    """`line_runs` covers the file in order: its runs and lines are the file's bytes."""
    rebuilt = b""
    for run in linewalk.line_runs(source, 0, len(data), 1 << 30, block_bytes=64):
        if isinstance(run, LineRun):
            assert run.start == len(rebuilt)
            rebuilt += run.data[: run.cut]
            assert (
                linewalk.join_lines(linewalk.split_lines(run.data[: run.cut]))
                == run.data[: run.cut]
            )
        else:
            assert run.start == len(rebuilt) and run.data is not None
            rebuilt += run.data + (b"\n" if run.terminated else b"")
    assert rebuilt == data


_KEY = re.compile(rb"\{")


def check_find_key(source: ByteSource, data: bytes, max_line: int) -> None:
    """`find_key` yields each line holding a key once, in order, wherever blocks cut it."""

    def finder(
        buffer: bytearray, lo: int, hi: int, end: int, base: int
    ) -> Iterator[tuple[int, int, str]]:
        for match in _KEY.finditer(buffer, lo, hi):
            yield match.start(), base + match.end(), "brace"

    expected = [
        KeyLine("brace", s, None if n > max_line else data[s : s + n])
        for s, n, _ in model(data)
        if b"{" in data[s : s + n]
    ]
    for chunk in (7, 64, 1 << 16):
        found = list(linewalk.find_key(source, finder, max_line, chunk=chunk, context=3, reach=1))
        assert found == expected, chunk
