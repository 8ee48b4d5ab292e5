"""Transcript lines as the history service serves them, over the shared line walker.

The walk itself (forwards, backwards, through the line index, in bounded
blocks, long lines held under one process-wide budget) is scrollback.linewalk's:
`iter_lines_forward`, `iter_lines_backward` and `iter_indexed` are that walker
with the history service's error for a file that shrinks under a read
(`FileShrankError`, TRANSCRIPT_REWRITTEN). Nothing here reads a file from its
start to find a window: a window costs O(window), not O(file).

`serve_line` turns one raw line into what a window serves, through the
contract's `strip_line` (the only stripper).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from history_service.errors import FileRewrittenError
from scrollback import linewalk
from scrollback.contract.stripping import (
    StrippedLine,
    oversize_line,
    strip_line,
    strip_line_streamed,
)
from scrollback.history.v1 import history_pb2
from scrollback.linefile import BLOCK_BYTES as BLOCK_BYTES
from scrollback.linefile import MARK_EDGE as MARK_EDGE
from scrollback.linefile import ByteSource, LineFile, TailScans
from scrollback.linewalk import INDEX_ROWS, Probe
from scrollback.linewalk import IndexRows as IndexRows
from scrollback.linewalk import RawLine as RawLine
from scrollback.linewalk import RowReads as RowReads
from scrollback.server import metrics

T = TypeVar("T")
# How far each file version's unterminated tail was searched, for every reader in the process.
TAIL_SCANS = TailScans()


class MediaMode(IntEnum):
    """What happens to payloads: the proto's MediaMode values, named for domain code."""

    DEFERRED = history_pb2.MEDIA_MODE_DEFERRED
    INLINE = history_pb2.MEDIA_MODE_INLINE


@dataclass(frozen=True, slots=True)
class ServedLine:
    """One entry as served: the stripped line plus where it came from."""

    offset: int
    line_size: int
    stripped: StrippedLine
    payloads_deferred: bool


class FileShrankError(FileRewrittenError):
    """The file became shorter while it was being read (rewritten or truncated)."""


def iter_lines_forward(
    fd: ByteSource, start: int, end: int, max_line: int, clear_to: int = 0
) -> Iterator[RawLine]:
    """The lines in [start, end) in file order (`linewalk.lines`)."""
    return linewalk.lines(fd, start, end, max_line, clear_to, FileShrankError)


def iter_lines_backward(fd: ByteSource, end: int, max_line: int) -> Iterator[RawLine]:
    """The lines before `end` (a line start), newest first (`linewalk.lines_backward`)."""
    return linewalk.lines_backward(fd, end, max_line, FileShrankError)


def iter_indexed(
    fd: ByteSource,
    start: int,
    end: int,
    max_line: int,
    rows: IndexRows,
    *,
    backward: bool,
    probe: Probe[T] | None = None,
    batch: int = INDEX_ROWS,
) -> Iterator[RawLine | T]:
    """The lines in [start, end) through the line index's rows (`linewalk.indexed`)."""
    return linewalk.indexed(
        fd,
        start,
        end,
        max_line,
        rows,
        backward=backward,
        probe=probe,
        batch=batch,
        changed=FileShrankError,
    )


def is_blank(raw: RawLine) -> bool:
    """True for an empty or whitespace-only line (ignored, not counted)."""
    return raw.data is not None and (not raw.data or raw.data.isspace())


def serve_line(
    raw: RawLine, mode: MediaMode, inline_limit: int, max_line_size: int
) -> ServedLine | None:
    """Strip one non-blank line for serving; None if it is not a JSON object.

    A line too large to hold is stripped by streaming it from its file, and
    served stripped when that brings it under the max line size; only a line
    still too large after stripping (or one with no file) becomes the stub.
    """
    if raw.data is None and raw.fd is not None:
        stripped = strip_line_streamed(
            LineFile(raw.fd).line_reader(raw.start, raw.size, FileShrankError),
            raw.size,
            inline_limit,
            max_line_size,
        )
        if stripped is None:
            return None
        if stripped.cut_count:
            metrics.PAYLOADS_STRIPPED.inc(stripped.cut_count)
        deferred = mode == MediaMode.INLINE and stripped.cut_count > 0
        return ServedLine(raw.start, raw.size, stripped, deferred)
    if raw.data is None or raw.size > max_line_size:
        data = raw.data
        stub = oversize_line(
            raw.size, None if data is None else lambda start, length: data[start : start + length]
        )
        return None if stub is None else ServedLine(raw.start, raw.size, stub, False)
    if mode == MediaMode.INLINE:
        # INLINE serves a line up to the max line size whole (in EntryJsonChunks
        # when it does not fit one message), payloads and all.
        stripped = strip_line(raw.data, raw.size + 1, max_line_size)
    else:
        stripped = strip_line(raw.data, inline_limit, max_line_size)
    if stripped is None:
        return None
    if stripped.cut_count:
        metrics.PAYLOADS_STRIPPED.inc(stripped.cut_count)
    return ServedLine(raw.start, raw.size, stripped, False)
