"""Reading transcript lines from an open file, each read checked against the bytes there now.

Both services find lines by remembered offsets (a page token, the line index, a
media ref's hint, a cache) in files that other programs append to and may
rewrite. Whatever remembered where a line was, the answer is only used when the
file still has a whole line there. The rules, written once here and tested once
(tests/unit/test_linefile.py):

- a line starts at offset 0 or just after a newline (`starts_line`);
- a line is the bytes up to its newline, newline excluded, none inside; the last
  line of a file may be unterminated (`line_at`, `line_from`, `line_end`);
- a line over the max line size is never read whole: only its end is searched
  for, block by block (`line_end`, `has_newline`), and at most `max_line + 1`
  bytes are read back from the end for the start of an unterminated tail
  (`tail_start`);
- an unterminated tail is searched for a newline once per file version:
  `TailScans` remembers how far, so the next search (a watch starting, the
  next poll, the next indexing pass) reads only the bytes appended since.

`LineFile` reads through a `ByteSource`, positional reads of one open
transcript: `LocalSource` over a file descriptor, or scrollback.objects'
`ObjectSource` over an object in a bucket (ranged GETs), or
scrollback.memory_source's `MemorySource` over bytes in memory. Opening and closing the
source are the caller's (scrollback.transcripts). `FileVersion` names which
bytes a result came from: the caches, the line index and page tokens key what
they keep by it; `FileIdentity` is a version at the size it was seen (what a
token continues from), and `FileRewrittenError` says a file no longer continues it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

import xxhash

from scrollback.contract.reading import ByteReader
from scrollback.line_budget import LineMemoryBudget

# What ends a line.
NEWLINE = b"\n"
# Blocks read when searching for a newline.
BLOCK_BYTES = 256 * 1024
# The first read of a line from a hint; later reads grow fourfold, so a short
# line costs one small read and a megabyte line a few.
FIRST_READ_BYTES = 256 * 1024


# The first bytes of a file that name its version (all of them while it is shorter).
HEAD_BYTES = 4096
# Tails searched this far are remembered (`TailScans`); shorter ones cost a block to search again.
REMEMBERED_TAIL_BYTES = BLOCK_BYTES
# The bytes before a remembered scan's end that must still be there (hashed).
TAIL_MARK_BYTES = 64
# File versions whose tails a TailScans remembers (the least recently used go first).
TAIL_SCANS = 1024
# Bytes of each end of a line its mark hashes (`line_mark`).
MARK_EDGE = 256


class SourceStat(Protocol):
    """What a source's `stat` tells (os.stat_result has it all)."""

    @property
    def st_size(self) -> int: ...
    @property
    def st_dev(self) -> int: ...
    @property
    def st_ino(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...
    @property
    def st_ctime_ns(self) -> int: ...


class ByteSource(Protocol):
    """Positional reads of one open transcript, wherever its bytes are kept.

    `read` and `read_into` return fewer bytes only at the end of the source;
    `stat` is its size and times now; `dup` a second handle on the same bytes
    that can be closed on its own (a background build keeps one).
    """

    __slots__ = ()

    def read(self, length: int, offset: int) -> bytes: ...
    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int: ...
    def stat(self) -> SourceStat: ...
    def dup(self) -> ByteSource: ...
    def close(self) -> None: ...

    # A source is closed at the end of a `with`; implementations that subclass
    # ByteSource inherit these two.
    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


class LocalSource(ByteSource):
    """A file on a local (or shared) filesystem, by its descriptor; owns it."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, length: int, offset: int) -> bytes:
        """The bytes [offset, offset + length), fewer at the end of the file (os.pread)."""
        return os.pread(self.fd, length, offset)

    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int:
        """Read into `buffer` from `offset`; the count read, fewer at the end (os.preadv)."""
        return os.preadv(self.fd, [buffer], offset)

    def stat(self) -> os.stat_result:
        """The file's fstat now."""
        return os.fstat(self.fd)

    def dup(self) -> LocalSource:
        """A second descriptor of the same open file."""
        return LocalSource(os.dup(self.fd))

    def close(self) -> None:
        """Close the descriptor."""
        os.close(self.fd)


class FileRewrittenError(Exception):
    """The file no longer continues a version: rewritten or truncated since it was seen."""

    def __init__(self) -> None:
        super().__init__("the transcript was rewritten or truncated since this token was issued")


def head_hash(head: bytes | memoryview) -> int:
    """The xxh3 (64-bit) of a file's first bytes: what names its version."""
    return xxhash.xxh3_64_intdigest(head)


@dataclass(frozen=True, slots=True)
class FileVersion:
    """Which file a result came from: its device and inode and the xxh3 of its first bytes.

    It stays equal while the file only grows (past HEAD_BYTES), and differs once the
    file is replaced or rewritten from its start; what a reader keeps of a file is
    keyed by it (caches, the line index, page tokens through `FileIdentity`), and
    checked against the bytes there before it is trusted.
    """

    dev: int
    ino: int
    head_len: int
    head_hash: int

    @classmethod
    def of(cls, source: ByteSource, stat: SourceStat | None = None) -> FileVersion:
        """The version of an open source now (`stat`: its stat, when the caller took one)."""
        stat = source.stat() if stat is None else stat
        head = source.read(min(HEAD_BYTES, stat.st_size), 0)
        return cls(stat.st_dev, stat.st_ino, len(head), head_hash(head))

    @property
    def hex_hash(self) -> str:
        """The head's hash as 16 hex digits (how the line index's store keeps it)."""
        return f"{self.head_hash:016x}"

    def head_matches(self, source: ByteSource) -> bool:
        """True if the source's first `head_len` bytes are still the ones hashed."""
        head = source.read(self.head_len, 0)
        return len(head) == self.head_len and head_hash(head) == self.head_hash


_NULL_VERSION = FileVersion(0, 0, 0, 0)
# How a transcript source names the version of one of its open transcripts
# (scrollback.transcripts.TranscriptSource.version; FileVersion.of for files and objects).
VersionOf = Callable[[ByteSource, SourceStat | None], FileVersion]


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """A file version at the size it was seen: what a page token or a watch position
    continues from, valid while the file only grows."""

    version: FileVersion
    size: int

    @property
    def is_null(self) -> bool:
        """True for the identity of a transcript that did not exist yet."""
        return self.version.dev == 0 and self.version.ino == 0 and self.size == 0

    @classmethod
    def null(cls) -> FileIdentity:
        """The identity of a transcript not written yet (any file continues it)."""
        return cls(_NULL_VERSION, 0)

    @classmethod
    def of(cls, source: ByteSource, version: VersionOf = FileVersion.of) -> FileIdentity:
        """The identity of an open source now: its version (as `version` names it) and size."""
        stat = source.stat()
        return cls(version(source, stat), stat.st_size)

    def at(self, size: int) -> FileIdentity:
        """The same version seen at another size."""
        return FileIdentity(self.version, size)

    def check(
        self, source: ByteSource, boundary: int, version: VersionOf = FileVersion.of
    ) -> FileIdentity:
        """The source's identity now if it continues this one, else FileRewrittenError.

        The file must be the same inode, at least as long as when seen, with the
        same first bytes, and `boundary` must still be a line start.
        """
        current = FileIdentity.of(source, version)
        if self.is_null:
            return current
        mine, now = self.version, current.version
        if (now.dev, now.ino) != (mine.dev, mine.ino) or current.size < self.size:
            raise FileRewrittenError()
        if not mine.head_matches(source):
            raise FileRewrittenError()
        if boundary > 0 and not LineFile(source).starts_line(boundary):
            raise FileRewrittenError()
        return current


def _edges_hold(before: bytes, after: bytes, before_len: int, terminated: bool) -> bool:
    """True if a line's neighbours end it: a newline before (`before_len` 1; none at the
    file's start) and after (or the end of the file, when it may be unterminated)."""
    if len(before) != before_len or (before_len and before != NEWLINE):
        return False
    return after == NEWLINE or (not terminated and not after)


def line_mark(read: ByteReader, offset: int, length: int) -> int | None:
    """The xxh3 mark of the terminated line [offset, offset + length), None if it is not one.

    The hash of the newline before it (none at the file's start), its first
    and last MARK_EDGE bytes and the newline after it; a short line whole. A
    cache keeps it beside what it derived from the line and checks it with a
    few bytes instead of the whole line (history_service.entry_cache).
    """
    before = 1 if offset > 0 else 0
    start = offset - before
    if length <= 2 * MARK_EDGE:
        data = read(start, before + length + 1)
        if len(data) != before + length + 1:
            return None
    else:
        data = read(start, before + MARK_EDGE) + read(offset + length - MARK_EDGE, MARK_EDGE + 1)
        if len(data) != before + 2 * MARK_EDGE + 1:
            return None
    if data[-1] != NEWLINE[0] or (before and data[0] != NEWLINE[0]):
        return None
    return xxhash.xxh3_64_intdigest(data)


def mark_of(offset: int, data: bytes) -> int:
    """The `line_mark` of a terminated line whose bytes (newline excluded) are `data`."""
    before = NEWLINE if offset > 0 else b""
    if len(data) <= 2 * MARK_EDGE:
        return xxhash.xxh3_64_intdigest(before + data + NEWLINE)
    return xxhash.xxh3_64_intdigest(before + data[:MARK_EDGE] + data[-MARK_EDGE:] + NEWLINE)


class LineFile:
    """The lines of one open source, by byte offset."""

    __slots__ = ("source",)

    def __init__(self, source: ByteSource) -> None:
        self.source = source

    def read(self, length: int, offset: int) -> bytes:
        """The bytes [offset, offset + length), fewer at the end of the source."""
        return self.source.read(length, offset)

    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int:
        """Read into `buffer` from `offset`; the count read, fewer at the end."""
        return self.source.read_into(buffer, offset)

    def starts_line(self, offset: int) -> bool:
        """True if a line starts at `offset`: the file's start, or just after a newline."""
        return offset == 0 or (offset > 0 and self.source.read(1, offset - 1) == NEWLINE)

    def line_at(
        self,
        offset: int,
        length: int,
        *,
        terminated: bool = True,
        read: ByteReader | None = None,
        budget: LineMemoryBudget | None = None,
    ) -> bytes | None:
        """The whole line at a remembered place, or None if the file no longer has it there.

        It must start a line, hold `length` bytes without a newline, and be
        followed by a newline; with `terminated=False` the end of the file
        also ends it (the unterminated last line). `read` (offset, length)
        serves the small reads (a batch of rows read at once, `RowReads`);
        a line longer than a block is read exactly, with `budget` held for
        it when given (the caller gives back `budget.share(length)`).
        """
        if length < 0 or offset < 0:
            return None
        read = self.read_at if read is None else read
        before = 1 if offset > 0 else 0
        if length <= BLOCK_BYTES:
            data = read(offset - before, before + length + 1)
            if len(data) < before + length or data.find(NEWLINE, before, before + length) >= 0:
                return None
            if not _edges_hold(data[:before], data[before + length :], before, terminated):
                return None
            return data[before : before + length]
        # A long line is read exactly (no slicing copy of a megabyte line), its edges apart.
        edges = read(offset - before, before), read(offset + length, 1)
        if not _edges_hold(*edges, before, terminated):
            return None
        held = 0 if budget is None else budget.acquire(length)
        try:
            data = self.source.read(length, offset)
        except BaseException:
            if budget is not None:
                budget.release(held)
            raise
        if len(data) != length or NEWLINE in data:
            if budget is not None:
                budget.release(held)
            return None
        return data

    def holds_line(self, offset: int, length: int, read: ByteReader | None = None) -> bool:
        """True if [offset, offset + length) is a whole terminated line, without holding it
        (a line over the max line size: only searched for a newline, block by block)."""
        if length < 0 or offset < 0:
            return False
        read = self.read_at if read is None else read
        before = 1 if offset > 0 else 0
        edges = read(offset - before, before), read(offset + length, 1)
        return _edges_hold(*edges, before, True) and not self.has_newline(offset, length)

    def read_at(self, offset: int, length: int) -> bytes:
        """The bytes [offset, offset + length) as a `ByteReader` reads them (fewer at the end)."""
        return self.source.read(length, offset)

    def line_end(self, start: int, max_line: int, search_from: int | None = None) -> int | None:
        """Where the line at `start` ends (its newline, or the end of the file); None past `max_line`.

        The search starts at `search_from` (a place already known to be inside
        the line), else at `start`.
        """
        position = start if search_from is None else search_from
        while position - start <= max_line:
            block = self.source.read(BLOCK_BYTES, position)
            if not block:
                return position  # an unterminated last line
            newline = block.find(b"\n")
            if newline >= 0:
                end = position + newline
                return end if end - start <= max_line else None
            position += len(block)
        return None

    def line_length(self, start: int) -> int:
        """The length of the line at `start` (to its newline or the end of the file), however long."""
        position = start
        while True:
            block = self.source.read(BLOCK_BYTES, position)
            newline = block.find(b"\n")
            if newline >= 0:
                return position + newline - start
            if len(block) < BLOCK_BYTES:
                return position + len(block) - start
            position += len(block)

    def line_from(self, start: int, max_line: int) -> bytes | None:
        """The line starting at `start` (a hint), read up to its newline; None if there is none.

        None when `start` does not start a line, is at or past the end of the
        file, or the line is over `max_line` (at most `max_line + 1` bytes are
        ever read). An unterminated last line is returned as it is.
        """
        if start < 0 or not self.starts_line(start):
            return None
        data, ended = self.line_head(start, max_line)
        return None if data is None or (not ended and not data) else data

    def line_head(
        self, start: int, max_line: int, first_read: int = FIRST_READ_BYTES
    ) -> tuple[bytes | None, bool]:
        """The line at `start` (a line start) read up to its newline, reads growing fourfold
        from `first_read`: (its bytes, True) once it ended; (None, True) past `max_line` (at
        most `max_line + 1` bytes are read); (the bytes up to the end of the file, False)
        while it is unterminated."""
        parts: list[bytes] = []
        total = 0
        position = start
        block = first_read
        budget = max_line + 1  # the line and its newline
        while total < budget:
            data = self.source.read(min(block, budget - total), position)
            if not data:
                break
            newline = data.find(NEWLINE)
            if newline >= 0:
                if not parts:
                    return data[:newline], True
                parts.append(data[:newline])
                return b"".join(parts), True
            parts.append(data)
            total += len(data)
            position += len(data)
            block *= 4
        if total > max_line:
            return None, True
        return b"".join(parts), False

    def has_newline(self, start: int, length: int) -> bool:
        """True if [start, start + length) holds a newline (or is cut short), read block by block."""
        block = bytearray(min(BLOCK_BYTES, max(length, 1)))
        view = memoryview(block)
        position, end = start, start + length
        while position < end:
            count = self.source.read_into(view[: min(len(block), end - position)], position)
            if count <= 0 or block.find(b"\n", 0, count) >= 0:
                return True
            position += count
        return False

    def tail_start(
        self, size: int, max_line: int, long_tail: Callable[[], int] | None = None
    ) -> int:
        """The start of the file's unterminated last line, or `size` if it ends with a newline.

        At most `max_line + 1` bytes are read back: a tail longer than the max
        line size is never served, only its start matters. Past that bound
        `long_tail` answers (the persisted line index, scrollback.lineindex,
        built forward once); without it the scan goes on back to the previous
        newline.
        """
        if size == 0 or self.source.read(1, size - 1) == b"\n":
            return size
        # With an index to ask, nothing before the bound is read.
        floor = 0 if long_tail is None else max(0, size - max_line - 1)
        position = size
        while position > 0:
            if long_tail is not None and position <= floor:
                return long_tail()
            read_from = max(floor, position - BLOCK_BYTES)
            chunk = self.source.read(position - read_from, read_from)
            found = chunk.rfind(b"\n")
            if found >= 0:
                return read_from + found + 1
            position = read_from
        return 0

    def line_reader(self, start: int, size: int, changed: Callable[[], Exception]) -> ByteReader:
        """Exact reads of the line [start, start + size) by offset within it.

        A read outside the line is a ValueError; one that comes back short
        (the file shrank under the reader) raises `changed()`.
        """
        source = self.source

        def read(offset: int, length: int) -> bytes:
            if offset < 0 or offset + length > size:
                raise ValueError("read outside the line")
            data = source.read(length, start + offset)
            if len(data) != length:
                raise changed()
            return data

        return read


@dataclass(frozen=True, slots=True)
class _Scanned:
    """[start, scanned) of a file version holds no newline; `mark` hashes the bytes before `scanned`."""

    start: int
    scanned: int
    mark: str


class TailScans:
    """How far the unterminated tail of each file version was searched for a newline.

    A tail being written (or one gigabytes long) would otherwise be searched
    whole by every reader that needs its start or its end: each search here
    resumes where the last one of that file version stopped. A remembered
    scan holds while the file is the same version, at least as long, with the
    same bytes just before the scan's end. Thread-safe; bounded to
    `capacity` file versions.
    """

    def __init__(self, capacity: int = TAIL_SCANS) -> None:
        self._capacity = capacity
        self._scans: OrderedDict[FileVersion, _Scanned] = OrderedDict()
        self._lock = threading.Lock()

    def clear_to(self, source: ByteSource, version: FileVersion, start: int, size: int) -> int:
        """How far from `start` (a line start) the file's first `size` bytes hold no newline,
        as far as searched before (`start` when unknown)."""
        known = self._known(source, version, size)
        return known.scanned if known is not None and known.start == start else start

    def remember(self, source: ByteSource, version: FileVersion, start: int, scanned: int) -> None:
        """[start, scanned) was searched and holds no newline (`start` a line start)."""
        if scanned - start < REMEMBERED_TAIL_BYTES:
            return
        with self._lock:
            known = self._scans.get(version)
        if known is not None and known.start == start and known.scanned >= scanned:
            return
        mark = source.read(TAIL_MARK_BYTES, scanned - TAIL_MARK_BYTES)
        if len(mark) != TAIL_MARK_BYTES:
            return
        with self._lock:
            self._scans[version] = _Scanned(start, scanned, xxhash.xxh3_64_hexdigest(mark))
            self._scans.move_to_end(version)
            while len(self._scans) > self._capacity:
                self._scans.popitem(last=False)

    def tail_start(self, source: ByteSource, version: FileVersion, size: int) -> int:
        """The start of the unterminated last line of the first `size` bytes (`size` if they
        end with a newline), reading back only as far as the last search of this version."""
        if size == 0 or source.read(1, size - 1) == b"\n":
            return size
        known = self._known(source, version, size)
        floor = 0 if known is None else known.scanned
        position = size
        start = 0 if known is None else known.start
        while position > floor:
            read_from = max(floor, position - BLOCK_BYTES)
            chunk = source.read(position - read_from, read_from)
            found = chunk.rfind(b"\n")
            if found >= 0:
                start = read_from + found + 1
                break
            position = read_from
        self.remember(source, version, start, size)
        return start

    def _known(self, source: ByteSource, version: FileVersion, size: int) -> _Scanned | None:
        with self._lock:
            known = self._scans.get(version)
        if known is None or known.scanned > size:
            return None
        mark = source.read(TAIL_MARK_BYTES, known.scanned - TAIL_MARK_BYTES)
        if xxhash.xxh3_64_hexdigest(mark) != known.mark or b"\n" in mark:
            with self._lock:
                if self._scans.get(version) == known:
                    del self._scans[version]
            return None
        return known
