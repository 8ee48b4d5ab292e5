"""Reading transcript lines by byte range, forwards and backwards, in bounded blocks.

Nothing here reads a file from its start to find a window: backward reads
start at the window's end and go back block by block until they met enough line
starts, so a window costs O(window), not O(file). Newlines are searched in one
reusable block buffer and each line is read at most once more, so memory is a
block plus the line being served. A line longer than the max line size is
never held whole: the scan only looks for its newline and yields it without
data (the caller serves an oversize stub).

`iter_indexed_backward` / `iter_indexed_forward` yield the same lines from the
rows of the persisted line index (scrollback.lineindex), each checked against
the file first (`RowReads` reads what a batch of rows needs at once); the
first row that does not hold hands over to the byte scan.

`serve_line` turns one raw line into what a window serves, through the
contract's `strip_line` (the only stripper).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

import xxhash

from history_service.errors import FileRewrittenError
from scrollback.contract.limits import DEFAULT_MAX_LINE_SIZE
from scrollback.contract.stripping import (
    StrippedLine,
    oversize_line,
    strip_line,
    strip_line_streamed,
)
from scrollback.history.v1 import history_pb2
from scrollback.linefile import ByteSource, LineFile, TailScans
from scrollback.server import metrics

BLOCK_BYTES = 256 * 1024
# How far each file version's unterminated tail was searched, for every reader in the process.
TAIL_SCANS = TailScans()
# A served entry's json up to this size goes whole into one Entry message
# (below gRPC's 4 MiB, with room for the entry's other fields).
ENTRY_JSON_FIT = 3 * 1024 * 1024 + 512 * 1024
# The size of each EntryJsonChunk part (and of Entry.json when chunked).
JSON_CHUNK_BYTES = 3 * 1024 * 1024


class MediaMode(IntEnum):
    """What happens to payloads: the proto's MediaMode values, named for domain code."""

    DEFERRED = history_pb2.MEDIA_MODE_DEFERRED
    INLINE = history_pb2.MEDIA_MODE_INLINE


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line's byte range (newline excluded) and its bytes, or None when too large to hold."""

    start: int
    end: int
    data: bytes | None
    terminated: bool
    # The file it was read from, so a line too large to hold can be stripped
    # by streaming it (None when the bytes are all there is).
    fd: ByteSource | None = None

    @property
    def size(self) -> int:
        """The line's length in bytes, newline excluded."""
        return self.end - self.start

    @property
    def next_start(self) -> int:
        """Where the next line starts."""
        return self.end + 1 if self.terminated else self.end


@dataclass(frozen=True, slots=True)
class ServedLine:
    """One entry as served: the stripped line plus where it came from."""

    offset: int
    line_size: int
    stripped: StrippedLine
    payloads_deferred: bool


def iter_lines_forward(
    fd: ByteSource, start: int, end: int, max_line: int, clear_to: int = 0
) -> Iterator[RawLine]:
    """Yield the lines in [start, end) in file order; the last may be unterminated.

    Newlines are searched in one reusable block buffer; a line that fits in the
    block is copied out of it, a longer one is read with one `pread` of exactly
    its size, and a line over `max_line` is never read whole. So memory is one
    block plus the line being served, whatever the lines before it weighed.
    `clear_to`: [start, clear_to) is known to hold no newline (TailScans), so
    the first line's newline is searched from there.
    """
    block = bytearray(BLOCK_BYTES)
    view = memoryview(block)
    block_start = block_end = start  # the file range the block holds
    position = start
    while position < end:
        search = max(position, min(clear_to, end)) if position == start else position
        newline = -1
        while True:
            if search < block_end:
                found = block.find(b"\n", search - block_start, block_end - block_start)
                if found >= 0:
                    newline = block_start + found
                    break
                search = block_end
            if search >= end:
                break
            read = LineFile(fd).read_into(view[: min(BLOCK_BYTES, end - search)], search)
            if read <= 0:
                end = search  # the file shrank under us: stop at what we have
                break
            block_start, block_end = search, search + read
        terminated = newline >= 0
        line_end = newline if terminated else end
        held = _hold(block_start, block_end, position, line_end, max_line)
        try:
            yield RawLine(
                position,
                line_end,
                _line_bytes(fd, view, block_start, block_end, position, line_end, max_line),
                terminated,
                fd,
            )
        finally:
            _LONG_LINE_BUDGET.release(held)
        if not terminated:
            return
        position = newline + 1


def iter_lines_backward(fd: ByteSource, end: int, max_line: int) -> Iterator[RawLine]:
    """Yield the lines before `end` (0 or just after a newline), newest first.

    The mirror of `iter_lines_forward`: newlines are searched backwards in one
    reusable block, and each line is copied out of it or read exactly once.
    """
    block = bytearray(BLOCK_BYTES)
    view = memoryview(block)
    block_start = block_end = end
    line_end = end - 1  # the newline that ends the current line (excluded)
    while line_end >= 0:
        search = line_end
        newline = -1
        while True:
            if block_start < search:
                found = block.rfind(b"\n", 0, search - block_start)
                if found >= 0:
                    newline = block_start + found
                    break
                search = block_start
            if search <= 0:
                break
            read_from = max(0, search - BLOCK_BYTES)
            read = LineFile(fd).read_into(view[: search - read_from], read_from)
            if read != search - read_from:
                raise FileShrankError()
            block_start, block_end = read_from, search
        line_start = newline + 1
        held = _hold(block_start, block_end, line_start, line_end, max_line)
        try:
            yield RawLine(
                line_start,
                line_end,
                _line_bytes(fd, view, block_start, block_end, line_start, line_end, max_line),
                True,
                fd,
            )
        finally:
            _LONG_LINE_BUDGET.release(held)
        line_end = newline


# Rows asked of the line index at a time: a whole page (and a few skipped lines) in one query.
INDEX_ROWS = 208
# The most blank lines (bytes) between two indexed lines checked before the byte scan takes over.
MAX_INDEX_GAP = 4096

# Rows of the persisted line index, fetched on demand: (offset, length) from a position.
IndexRows = Callable[[int, int], list[tuple[int, int]]]
T = TypeVar("T")
# A read of the file: (length, offset) -> bytes, as os.pread.
Read = Callable[[int, int], bytes]
# What a caller may answer for an indexed line before it is read (offset, length, its batch's reads).
Probe = Callable[[int, int, "RowReads"], T | None]
# Bytes of each end of an indexed line its checks read (entry_cache marks cover the same).
ROW_EDGE = 256
# Ranges of a batch of rows closer than this are read as one.
MERGE_GAP = 1024
# One merged read never exceeds this.
MAX_MERGED = 1024 * 1024


class RowReads:
    """The bytes that checking a batch of indexed rows needs, read in few `pread`s.

    Each row needs the newline before it, its first and last ROW_EDGE bytes
    and the newline after it (a short line: all of it); the ranges of a batch
    are merged when close and read at once, so a window of N lines costs
    about as many reads as it has long lines, not 2N (each read releases and
    retakes the GIL, which the event loop thread is waiting for). Anything
    else is read from the file as asked. Nothing is read until something is
    asked: a batch whose rows all have cached entries known to be current
    (history_service.entry_cache) reads nothing.
    """

    def __init__(self, fd: ByteSource, rows: list[tuple[int, int]]) -> None:
        self.fd = fd
        self._rows: list[tuple[int, int]] | None = rows
        self._starts: list[int] = []
        self._blocks: list[bytes] = []

    def _load(self, rows: list[tuple[int, int]]) -> None:
        ranges: list[tuple[int, int]] = []
        for offset, length in rows:
            start = max(0, offset - 1)
            if length <= 2 * ROW_EDGE:
                ranges.append((start, offset + length + 1))
            else:
                ranges.append((start, offset + ROW_EDGE))
                ranges.append((offset + length - ROW_EDGE, offset + length + 1))
        ranges.sort()
        merged: list[list[int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1] + MERGE_GAP and end - merged[-1][0] <= MAX_MERGED:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            self._starts.append(start)
            self._blocks.append(LineFile(self.fd).read(end - start, start))

    def mark(self, offset: int, length: int) -> int | None:
        """The xxh3 mark of the line [offset, offset + length), None if it is not a whole line.

        The hash of the newline before it (none at the file's start), its
        first and last ROW_EDGE bytes and the newline after it; a short line
        whole. history_service.entry_cache keeps it beside each cached entry.
        """
        before = 1 if offset > 0 else 0
        start = offset - before
        if length <= 2 * ROW_EDGE:
            data = self.pread(before + length + 1, start)
            if len(data) != before + length + 1:
                return None
        else:
            data = self.pread(before + ROW_EDGE, start) + self.pread(
                ROW_EDGE + 1, offset + length - ROW_EDGE
            )
            if len(data) != before + 2 * ROW_EDGE + 1:
                return None
        if data[-1] != 10 or (before and data[0] != 10):
            return None
        return xxhash.xxh3_64_intdigest(data)

    def pread(self, length: int, offset: int) -> bytes:
        """The file's bytes [offset, offset + length) (fewer at its end), as os.pread."""
        if self._rows is not None:
            rows, self._rows = self._rows, None
            self._load(rows)
        at = bisect.bisect_right(self._starts, offset) - 1
        if at >= 0:
            start, block = self._starts[at], self._blocks[at]
            if offset + length <= start + len(block):
                return block[offset - start : offset - start + length]
        return LineFile(self.fd).read(length, offset)


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
    """The lines in [start, end), found through a line index: as `iter_lines_backward` (newest
    first, `start` 0) when `backward`, else as `iter_lines_forward`.

    `rows(offset, limit)` gives indexed (offset, length) rows in reading order:
    those starting before `offset`, newest first, backward; those at or after
    it, in file order, forward (scrollback.lineindex). Each row is checked
    against the file before it is used (`_indexed_line`): only blank lines
    between it and the line read before it, a newline on both sides, none
    inside. At the first row that fails, or when the rows run out, the byte
    scan goes on from the last checked line: a wrong row costs a scan, never
    wrong bytes (forward, past the last row that checks are the unterminated
    tail and lines appended since the index was extended). `probe(offset,
    length, read)` may answer for a line without its bytes being read (a
    cached entry whose mark it checked): its answer is yielded instead. Rows
    are asked `batch` at a time (a page and a few more).
    """
    position = end if backward else start
    while start < position if backward else position < end:
        batch_rows = rows(position, batch)
        if not batch_rows:
            break
        reads = RowReads(fd, batch_rows)
        read = reads.pread
        for offset, length in batch_rows:
            after = offset + length + 1  # where the next line may start
            # The blank lines between this line and the one read before it (this
            # line's own newline is checked with the line).
            gap = (after, position) if backward else (position, offset)
            if not 0 <= gap[1] - gap[0] <= MAX_INDEX_GAP or (not backward and after > end):
                break
            if gap[0] != gap[1] and not _only_newlines(read, *gap):
                break
            known = None if probe is None else probe(offset, length, reads)
            if known is None:
                line = _indexed_line(fd, read, offset, length, max_line)
                if line is None:
                    break
                held, raw = line
                try:
                    yield raw
                finally:
                    _LONG_LINE_BUDGET.release(held)
            else:
                yield known
            position = offset if backward else after
        else:
            continue
        break
    if backward and position > 0:
        yield from iter_lines_backward(fd, position, max_line)
    elif not backward and position < end:
        yield from iter_lines_forward(fd, position, end, max_line)


def _only_newlines(read: Read, start: int, end: int) -> bool:
    """True if [start, end) of the file is newlines only (blank lines the index leaves out)."""
    if end <= start:
        return end == start
    data = read(end - start, start)
    return len(data) == end - start and data.count(b"\n") == len(data)


def _indexed_line(
    fd: ByteSource, read: Read, offset: int, length: int, max_line: int
) -> tuple[int, RawLine] | None:
    """An indexed line read and checked against the file: (budget held, line), or None.

    It must be a whole line of the file now: a newline (or the file start)
    before it, a newline after it, none inside. A line held whole takes its
    size from _LONG_LINE_BUDGET when longer than a block (the caller gives it
    back); one over `max_line` is only searched for a newline, block by block.
    """
    if length <= 0:
        return None
    before = 1 if offset > 0 else 0
    if length > max_line:
        edges = read(before, offset - before) + read(1, offset + length)
        if edges != b"\n" * (before + 1) or LineFile(fd).has_newline(offset, length):
            return None
        return 0, RawLine(offset, offset + length, None, True, fd)
    if length <= BLOCK_BYTES:
        data = read(length + before + 1, offset - before)
        if (
            len(data) != length + before + 1
            or data[-1:] != b"\n"
            or (before and data[:1] != b"\n")
            or data.find(b"\n", before, before + length) >= 0
        ):
            return None
        return 0, RawLine(offset, offset + length, data[before : before + length], True, fd)
    # A long line is read exactly (no second copy), its edges apart.
    edges = read(before, offset - before) + read(1, offset + length)
    if edges != b"\n" * (before + 1):
        return None
    held = _LONG_LINE_BUDGET.acquire(length)
    try:
        data = LineFile(fd).read(length, offset)
        if len(data) != length or b"\n" in data:
            _LONG_LINE_BUDGET.release(held)
            return None
    except BaseException:
        _LONG_LINE_BUDGET.release(held)
        raise
    return held, RawLine(offset, offset + length, data, True, fd)


class LineMemoryBudget:
    """Bounds the bytes of long lines held at once by all reads of the process.

    Every window and watch reads in worker threads; without a bound, N
    concurrent reads of 10 MB image lines hold N of them. A reader takes the
    line's size from the budget before reading it and gives it back once the
    line is served, waiting while others hold it; a line larger than the whole
    budget waits until it can hold the budget alone. Short lines (at most a
    block) do not take from it.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._held = 0
        self._changed = threading.Condition()

    def acquire(self, size: int) -> int:
        """Take `size` bytes (cut to the budget); return what was taken."""
        size = min(size, self.budget_bytes)
        with self._changed:
            self._changed.wait_for(lambda: self._held + size <= self.budget_bytes)
            self._held += size
        return size

    def release(self, size: int) -> None:
        """Give back what `acquire` took."""
        with self._changed:
            self._held -= size
            self._changed.notify_all()


# Internal, not a setting: room for one line of the largest size a window serves at a time.
_LONG_LINE_BUDGET = LineMemoryBudget(DEFAULT_MAX_LINE_SIZE)


class FileShrankError(FileRewrittenError):
    """The file became shorter while it was being read (rewritten or truncated)."""


def _hold(block_start: int, block_end: int, start: int, end: int, max_line: int) -> int:
    """Take a long line's size from the budget until it is served; 0 for others."""
    if end - start > max_line or (block_start <= start and end <= block_end):
        return 0  # not read, or copied out of the block
    return _LONG_LINE_BUDGET.acquire(end - start)


def _line_bytes(
    fd: ByteSource,
    view: memoryview,
    block_start: int,
    block_end: int,
    start: int,
    end: int,
    max_line: int,
) -> bytes | None:
    """The bytes of [start, end): from the block when it holds them, else one read."""
    if end - start > max_line:
        return None
    if block_start <= start and end <= block_end:
        return bytes(view[start - block_start : end - block_start])
    data = LineFile(fd).read(end - start, start)
    if len(data) != end - start:
        raise FileShrankError()
    return data


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


def json_parts(json: bytes, part_bytes: int = JSON_CHUNK_BYTES) -> list[str]:
    """Split a json text into parts of at most `part_bytes`, on UTF-8 character boundaries."""
    if len(json) <= ENTRY_JSON_FIT:
        return [json.decode("utf-8", "replace")]
    parts: list[str] = []
    position = 0
    while position < len(json):
        cut = min(len(json), position + part_bytes)
        while cut < len(json) and cut > position and (json[cut] & 0xC0) == 0x80:
            cut -= 1
        parts.append(json[position:cut].decode("utf-8", "replace"))
        position = cut
    return parts
