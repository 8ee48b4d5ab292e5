"""Walking the lines of a transcript: forwards, backwards, through the line index, by key.

Every reader of transcript lines goes through here (the rules of a single
line, by offset, are scrollback.linefile's): windows, watches, the search and
insight passes, slim copies, the line index's build, the media service's
search for an entry. Newlines are searched in one reusable block buffer and
each line is read at most once more, so memory is a block plus the line being
served, whatever the lines before it weighed:

- `lines` (file order) and `lines_backward` (newest first, from a line
  start) yield `RawLine`s; a line that fits in the block is copied out of it,
  a longer one is read with one read of exactly its size while its size is
  held from the process's line budget (`LINE_BUDGET`), and a line over the max
  line size is never read whole: it is yielded without data.
- `indexed` yields the same lines from rows of the persisted line index
  (scrollback.lineindex), each checked against the file first
  (`LineFile.line_at`, with the bytes a batch of rows needs read at once by
  `RowReads`); the first row that does not hold hands over to the byte scan.
- `line_runs` gives runs of whole lines a block at a time (a copy that keeps
  most lines as they are), `find_key` the lines holding a key a caller's
  finder spots in blocks (an entry's uuid), and `NewlineSearch` /
  `last_newline` / `newlines` the block scans of the index build.

A source that shrinks under a walk raises `changed()` (SourceShrankError
unless the caller names its own error).
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import ctypes.util
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from scrollback.line_budget import LINE_BUDGET
from scrollback.linefile import (
    BLOCK_BYTES,
    MARK_EDGE,
    NEWLINE,
    ByteSource,
    LineFile,
    line_mark,
)

# Rows asked of the line index at a time: a whole page (and a few skipped lines) in one query.
INDEX_ROWS = 208
# The most blank lines (bytes) between two indexed lines checked before the byte scan takes over.
MAX_INDEX_GAP = 4096
# Ranges of a batch of rows closer than this are read as one.
MERGE_GAP = 1024
# One merged read never exceeds this.
MAX_MERGED = 1024 * 1024

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
# Rows of the persisted line index, fetched on demand: (offset, length) from a position.
IndexRows = Callable[[int, int], list[tuple[int, int]]]


@runtime_checkable
class KnownLines(Protocol):
    """A byte source that knows where its own lines are (a view made of a database's rows):
    its rows are the line index's, with no index to build."""

    def lines_before(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting before `offset`, newest first."""
        ...

    def lines_from(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting at or after `offset`, in order."""
        ...


# What a caller may answer for an indexed line before it is read (offset, length, its batch's reads).
Probe = Callable[[int, int, "RowReads"], T | None]
# A key finder over a block: (buffer, lo, hi, end, base) -> (line search from, inside the
# line, tag) for each key starting in buffer[lo:hi] (`find_key`).
KeyFinder = Callable[[bytearray, int, int, int, int], Iterator[tuple[int, int, K]]]


class SourceShrankError(Exception):
    """The source became shorter while its lines were read (rewritten or truncated)."""

    def __init__(self) -> None:
        super().__init__("the transcript became shorter while it was read")


Changed = Callable[[], Exception]


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line's byte range (newline excluded) and its bytes, or None when too large to hold."""

    start: int
    end: int
    data: bytes | None
    terminated: bool
    # The source it was read from, so a line too large to hold can be stripped
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
class LineRun:
    """Whole terminated lines: `data[:cut]` (ending with a newline) read at file offset `start`."""

    start: int
    data: bytes
    cut: int


@dataclass(frozen=True, slots=True)
class KeyLine(Generic[K]):
    """A line holding a key a finder spotted: its start, its bytes (None: over the max line
    size) and the finder's tag for the key."""

    tag: K
    start: int
    data: bytes | None


def lines(
    source: ByteSource,
    start: int,
    end: int,
    max_line: int,
    clear_to: int = 0,
    changed: Changed = SourceShrankError,
) -> Iterator[RawLine]:
    """Yield the lines in [start, end) in file order; the last may be unterminated.

    `clear_to`: [start, clear_to) is known to hold no newline (TailScans), so
    the first line's newline is searched from there. A source that ends
    before `end` ends the walk there.
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
                found = block.find(NEWLINE, search - block_start, block_end - block_start)
                if found >= 0:
                    newline = block_start + found
                    break
                search = block_end
            if search >= end:
                break
            read = source.read_into(view[: min(BLOCK_BYTES, end - search)], search)
            if read <= 0:
                end = search  # the file shrank under us: stop at what we have
                break
            block_start, block_end = search, search + read
        terminated = newline >= 0
        line_end = newline if terminated else end
        held = _hold(block_start, block_end, position, line_end, max_line)
        try:
            data = _line_bytes(
                source, view, (block_start, block_end), position, line_end, max_line, changed
            )
            yield RawLine(position, line_end, data, terminated, source)
        finally:
            LINE_BUDGET.release(held)
        if not terminated:
            return
        position = newline + 1


def lines_backward(
    source: ByteSource, end: int, max_line: int, changed: Changed = SourceShrankError
) -> Iterator[RawLine]:
    """Yield the lines before `end` (0 or just after a newline), newest first.

    The mirror of `lines`: newlines are searched backwards in one reusable
    block, and each line is copied out of it or read exactly once.
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
                found = block.rfind(NEWLINE, 0, search - block_start)
                if found >= 0:
                    newline = block_start + found
                    break
                search = block_start
            if search <= 0:
                break
            read_from = max(0, search - BLOCK_BYTES)
            read = source.read_into(view[: search - read_from], read_from)
            if read != search - read_from:
                raise changed()
            block_start, block_end = read_from, search
        line_start = newline + 1
        held = _hold(block_start, block_end, line_start, line_end, max_line)
        try:
            data = _line_bytes(
                source, view, (block_start, block_end), line_start, line_end, max_line, changed
            )
            yield RawLine(line_start, line_end, data, True, source)
        finally:
            LINE_BUDGET.release(held)
        line_end = newline


def _hold(block_start: int, block_end: int, start: int, end: int, max_line: int) -> int:
    """Take a long line's size from the budget until it is served; 0 for others."""
    if end - start > max_line or (block_start <= start and end <= block_end):
        return 0  # not read, or copied out of the block
    return LINE_BUDGET.acquire(end - start)


def _line_bytes(
    source: ByteSource,
    view: memoryview,
    block: tuple[int, int],
    start: int,
    end: int,
    max_line: int,
    changed: Changed,
) -> bytes | None:
    """The bytes of [start, end): from the block (its file range) when it holds them, else one
    read."""
    if end - start > max_line:
        return None
    if block[0] <= start and end <= block[1]:
        return bytes(view[start - block[0] : end - block[0]])
    data = source.read(end - start, start)
    if len(data) != end - start:
        raise changed()
    return data


class RowReads:
    """The bytes that checking a batch of indexed rows needs, read in few reads.

    Each row needs the newline before it, its first and last MARK_EDGE bytes
    and the newline after it (a short line: all of it); the ranges of a batch
    are merged when close and read at once, so a window of N lines costs
    about as many reads as it has long lines, not 2N (each read releases and
    retakes the GIL, which the event loop thread is waiting for). Anything
    else is read from the source as asked. Nothing is read until something is
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
            if length <= 2 * MARK_EDGE:
                ranges.append((start, offset + length + 1))
            else:
                ranges.append((start, offset + MARK_EDGE))
                ranges.append((offset + length - MARK_EDGE, offset + length + 1))
        ranges.sort()
        merged: list[list[int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1] + MERGE_GAP and end - merged[-1][0] <= MAX_MERGED:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            self._starts.append(start)
            self._blocks.append(self.fd.read(end - start, start))

    def mark(self, offset: int, length: int) -> int | None:
        """The line's `line_mark` (scrollback.linefile), None if it is not a whole line."""
        return line_mark(self.read, offset, length)

    def read(self, offset: int, length: int) -> bytes:
        """The source's bytes [offset, offset + length) (fewer at its end)."""
        if self._rows is not None:
            rows, self._rows = self._rows, None
            self._load(rows)
        at = bisect.bisect_right(self._starts, offset) - 1
        if at >= 0:
            start, block = self._starts[at], self._blocks[at]
            if offset + length <= start + len(block):
                return block[offset - start : offset - start + length]
        return self.fd.read(length, offset)


def indexed(
    source: ByteSource,
    start: int,
    end: int,
    max_line: int,
    rows: IndexRows,
    *,
    backward: bool,
    probe: Probe[T] | None = None,
    batch: int = INDEX_ROWS,
    changed: Changed = SourceShrankError,
) -> Iterator[RawLine | T]:
    """The lines in [start, end), found through a line index: as `lines_backward` (newest
    first, `start` 0) when `backward`, else as `lines`.

    `rows(offset, limit)` gives indexed (offset, length) rows in reading order:
    those starting before `offset`, newest first, backward; those at or after
    it, in file order, forward (scrollback.lineindex). Each row is checked
    against the file before it is used (`_indexed_line`): only blank lines
    between it and the line read before it, a newline on both sides, none
    inside. At the first row that fails, or when the rows run out, the byte
    scan goes on from the last checked line: a wrong row costs a scan, never
    wrong bytes (forward, past the last row that checks are the unterminated
    tail and lines appended since the index was extended). `probe(offset,
    length, reads)` may answer for a line without its bytes being read (a
    cached entry whose mark it checked): its answer is yielded instead. Rows
    are asked `batch` at a time (a page and a few more).
    """
    position = end if backward else start
    while start < position if backward else position < end:
        batch_rows = rows(position, batch)
        if not batch_rows:
            break
        reads = RowReads(source, batch_rows)
        for offset, length in batch_rows:
            after = offset + length + 1  # where the next line may start
            # The blank lines between this line and the one read before it (this
            # line's own newline is checked with the line).
            gap = (after, position) if backward else (position, offset)
            if not 0 <= gap[1] - gap[0] <= MAX_INDEX_GAP or (not backward and after > end):
                break
            if gap[0] != gap[1] and not _only_blank(reads.read, *gap):
                break
            known = None if probe is None else probe(offset, length, reads)
            if known is None:
                line = _indexed_line(source, reads, offset, length, max_line)
                if line is None:
                    break
                try:
                    yield line
                finally:
                    if line.data is not None and length > BLOCK_BYTES:
                        LINE_BUDGET.release(LINE_BUDGET.share(length))
            else:
                yield known
            position = offset if backward else after
        else:
            continue
        break
    if backward and position > 0:
        yield from lines_backward(source, position, max_line, changed)
    elif not backward and position < end:
        yield from lines(source, position, end, max_line, changed=changed)


def _only_blank(read: Callable[[int, int], bytes], start: int, end: int) -> bool:
    """True if [start, end) of the file is blank lines only (whitespace: the lines the index
    leaves out)."""
    if end <= start:
        return end == start
    data = read(start, end - start)
    return len(data) == end - start and data.isspace()


def _indexed_line(
    source: ByteSource, reads: RowReads, offset: int, length: int, max_line: int
) -> RawLine | None:
    """An indexed line read and checked against the file (`LineFile.line_at`), or None.

    A line held whole takes its size from LINE_BUDGET when longer than a block
    (the caller gives it back); one over `max_line` is only searched for a
    newline, block by block, and yielded without data.
    """
    if length <= 0:
        return None
    file = LineFile(source)
    if length > max_line:
        if not file.holds_line(offset, length, reads.read):
            return None
        return RawLine(offset, offset + length, None, True, source)
    data = file.line_at(offset, length, read=reads.read, budget=LINE_BUDGET)
    return None if data is None else RawLine(offset, offset + length, data, True, source)


def line_runs(
    source: ByteSource,
    start: int,
    end: int,
    max_line: int,
    block_bytes: int,
    changed: Changed = SourceShrankError,
) -> Iterator[LineRun | RawLine]:
    """The lines of [start, end) in order: runs of whole lines read `block_bytes` at a time,
    and, as a `RawLine` (from `lines`: bounded reads), a line longer than a block and the
    unterminated last line."""
    position = start
    while position < end:
        block = source.read(min(block_bytes, end - position), position)
        if not block:
            return  # the file shrank under us: stop at what we have
        cut = block.rfind(NEWLINE) + 1
        if cut == 0:
            # A line longer than the block, or the unterminated last line.
            for raw in lines(source, position, end, max_line, changed=changed):
                yield raw
                position = raw.next_start
                break
            continue
        yield LineRun(position, block, cut)
        position += cut


def line_around(data: bytes | bytearray, at: int) -> tuple[int, int]:
    """(start, end) of the line of `data` holding index `at`: start just after the newline
    before it (0 if none), end at the newline from `at` on (-1 if none)."""
    return data.rfind(NEWLINE, 0, at) + 1, data.find(NEWLINE, at)


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a run of whole lines (each ending with a newline), newlines excluded."""
    return data.split(NEWLINE)[:-1]


def join_lines(lines: list[bytes]) -> bytes:
    """A run of whole lines from their bytes (each ended with a newline): `split_lines` undone."""
    return NEWLINE.join(lines) + NEWLINE if lines else b""


def line_count(data: bytes | bytearray) -> int:
    """How many lines end in `data` (its newlines)."""
    return data.count(NEWLINE)


def last_newline(buffer: bytes | bytearray, count: int) -> int:
    """The index of the last newline in buffer[:count], or -1."""
    return buffer.rfind(NEWLINE, 0, count)


def newlines(buffer: bytes | bytearray, start: int, end: int) -> Iterator[int]:
    """The index of each newline in buffer[start:end], in order."""
    find = buffer.find
    newline = find(NEWLINE, start, end)
    while newline >= 0:
        yield newline
        newline = find(NEWLINE, newline + 1, end)


def _libc_memchr() -> Callable[[int, int, int], int | None] | None:
    """libc's memchr through ctypes (which drops the GIL during the call); None without one."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        memchr = ctypes.CDLL(ctypes.util.find_library("c")).memchr
        memchr.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
        memchr.restype = ctypes.c_void_p
        return memchr
    return None


_MEMCHR = _libc_memchr()


class NewlineSearch:
    """Finds the first newline in a prefix of one buffer without holding the GIL.

    A background build scans gigabytes of a newline-less line; `bytes.find`
    would hold the GIL for each piece, and the requests' threads of the same
    process would wait for it. Falls back to `find` where libc is not at hand.
    """

    def __init__(self, buffer: bytearray) -> None:
        self._buffer = buffer
        self._address = 0
        if _MEMCHR is not None:
            self._array = (ctypes.c_char * len(buffer)).from_buffer(buffer)
            self._address = ctypes.addressof(self._array)

    def find(self, count: int) -> int:
        """The offset of the first newline in buffer[:count], or -1."""
        if not self._address or _MEMCHR is None:
            return self._buffer.find(NEWLINE, 0, count)
        hit = _MEMCHR(self._address, NEWLINE[0], count)
        return -1 if hit is None else hit - self._address

    def close(self) -> None:
        """Release the buffer (it can be resized or freed again)."""
        if self._address:
            del self._array
            self._address = 0


def find_key(
    source: ByteSource,
    finder: KeyFinder[K],
    max_line: int,
    *,
    start: int = 0,
    chunk: int,
    context: int = 0,
    reach: int = 0,
    on_slice: Callable[[], None] | None = None,
) -> Iterator[KeyLine[K]]:
    """Each line from `start` (a line start) holding a key `finder` spots, once per tag.

    The source is read `chunk` bytes at a time into one reused buffer that
    keeps `context` bytes before the part being searched (for looking back
    from a key) and holds back the last `reach` bytes (a key starting there
    may be cut: it is searched with the next block). `finder(buffer, lo, hi,
    end, base)` yields, for each key starting in buffer[lo:hi] (buffer[:end]
    read, buffer[0] at file offset `base`) that it accepts: the buffer index to look back from for
    the line's start, a file offset known to be inside the line (its end is
    searched from there, `LineFile.line_end`), and a tag; a key with a
    newline between the two belongs to no line and is passed over. A line over
    `max_line` comes with no data. `on_slice` runs before each read (it
    raises to stop the walk).
    """
    buffer = bytearray(context + reach + chunk)
    view = memoryview(buffer)
    kept = searched = 0  # bytes kept at the front; where the unsearched ones start
    read_at = start
    carry = start  # the start of the line in effect at the buffer's first byte
    seen: set[tuple[K, int]] = set()
    file = LineFile(source)
    try:
        while True:
            if on_slice is not None:
                on_slice()
            count = source.read_into(view[kept : kept + chunk], read_at)
            size = kept + count
            base = read_at - kept
            limit = size if count == 0 else max(searched, size - reach)
            for back_from, inside, tag in finder(buffer, searched, limit, size, base):
                if buffer.find(NEWLINE, back_from, inside - base) >= 0:
                    continue  # a key across lines is no line's key
                line_start = buffer.rfind(NEWLINE, 0, back_from)
                found = base + line_start + 1 if line_start >= 0 else carry
                if (tag, found) in seen:
                    continue
                seen.add((tag, found))
                end = file.line_end(found, max_line, inside)
                data = None if end is None else source.read(end - found, found)
                yield KeyLine(tag, found, data)
            if count == 0:
                return
            keep_from = max(0, limit - context)
            newline = buffer.rfind(NEWLINE, 0, keep_from)
            if newline >= 0:
                carry = base + newline + 1
            kept = size - keep_from
            buffer[:kept] = buffer[keep_from:size]
            searched = limit - keep_from
            read_at += count
    finally:
        view.release()
