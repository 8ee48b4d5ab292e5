"""A persisted line index per transcript: build once, extend as it grows, rebuild on rewrite.

For each complete line of a transcript the index keeps its byte offset, its
length, its top-level `uuid` (found textually) and how many image blocks it may
hold (`"type":"image"` occurrences: a candidate count, exact enumeration stays
with the extraction code). The rows live in the state store
(scrollback.state.line_index), so a restart, another worker or another replica
finds them.

- **Build**: one forward pass in CHUNK_BYTES reads into one reused buffer
  (memory: a chunk and its rows). The newline search, the `"uuid"` keys and the
  image markers are found by C-level scans of the whole chunk; only a line with
  several `"uuid"` keys runs the top-level tokenizer (scrollback.contract.top_level).
  A line longer than a chunk is never held: its newline is searched piece by
  piece (libc's memchr, the GIL dropped, so the requests' threads of the
  process do not wait for a background build), its uuid read from both ends
  within bounded windows.
- **Extend**: the file grows append-only while the agent writes; the pass
  resumes where the index stopped (`covered`, or `scanned` within an
  unterminated tail, so a long tail is read once).
- **First touch**: a caller that must answer now asks `lines_so_far` (the
  rows of the part built so far, never waiting for a build) and has the rest
  built in the background (`build_later`, on threads at a low OS priority, so
  requests keep the CPU).
- **Requests never wait**: `current` and `covering` (what windows ask) never
  wait for a builder's lock; `current` extends inline only an append of at
  most INLINE_EXTEND_BYTES and leaves more to the background, and `covering`
  stops at the line it needs, so an unterminated tail is never read on a
  request's thread.
- **Fed**: a reader that goes through the file's lines anyway (the history
  service's indexing pass, which also feeds search and insight) hands them to
  a `LineFeed` (`LineIndex.feed`) instead, so the file is read once for all.
- **Rebuild**: before every use the file's version is checked (device, inode,
  the hash of its first bytes, a size not below what was scanned, and the hash
  of the bytes just before `covered`); any difference discards the rows.
  Callers still verify the line at an indexed offset (its uuid, its pin): a
  wrong row costs them a search, never wrong bytes. A source marked
  `blanks_in_place` (scrollback.gemini_live.LiveView, whose lines may turn
  blank while its version stays) skips the hash of those last bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

from scrollback import foreground
from scrollback.linefile import NEWLINE, ByteSource, FileVersion, LineFile
from scrollback.linerows import chunk_lines, long_line_entry
from scrollback.linewalk import NewlineSearch, last_newline
from scrollback.state.errors import StoreBusyError
from scrollback.state.line_index import IndexedFile, IndexedLine, LineIndexStore

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 1024 * 1024
MARK_BYTES = 64


# Builders racing on a file that keeps being rewritten give up after this many resets.
MAX_RESETS = 4
# Row queries remembered per process (`LineIndex.lines_before` / `lines_from`), and
# the fewest rows each asks the store for: a window asks for a page and a few more.
ROW_RUNS = 64
ROW_RUN_MIN = 256
# Files built at once per process by `build_later`'s threads.
MAX_BACKGROUND_BUILDS = 4
# A long line's newline is searched in pieces of this size: each search holds the GIL
# only briefly, so the requests' threads of the process are not kept waiting for it.
LONG_LINE_PIECE_BYTES = 1024 * 1024
# The most a request's thread extends an index by (`current`); more is built in the background.
INLINE_EXTEND_BYTES = 1024 * 1024
# Background work runs at this nice value: requests get the CPU first.
BACKGROUND_NICE = 19
# Rows a LineFeed writes per transaction, and the bytes of lines it indexes at once.
FEED_ROWS = 20_000
FEED_BYTES = 1024 * 1024


class FileChangingError(Exception):
    """The file was rewritten again each time it was indexed (callers read it directly)."""

    def __init__(self) -> None:
        super().__init__("the transcript kept changing while it was indexed")


# What a caller catches to read the file without the index instead.
INDEX_UNAVAILABLE: tuple[type[Exception], ...] = (StoreBusyError, FileChangingError)


def background_priority() -> None:
    """Lower the calling thread's OS priority (Linux: a thread has its own nice value).

    For threads that do background work (index builds) on a machine whose
    cores the requests share; a platform without per-thread priorities keeps
    the thread as it is.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    # ...and its steps wait for the process's requests (the GIL is not the OS's to share).
    foreground.background_thread()


def _hash(data: bytes | memoryview) -> str:
    return xxhash.xxh3_64_hexdigest(data)


def _continues(fd: ByteSource, state: IndexedFile) -> bool:
    """True if the open file is the version the index describes, grown or not."""
    stat = fd.stat()
    version = state.version
    if (stat.st_dev, stat.st_ino) != (version.dev, version.ino) or stat.st_size < state.scanned:
        return False
    if not version.head_matches(fd):
        return False
    if state.mark_len:
        mark = LineFile(fd).read(state.mark_len, state.covered - state.mark_len)
        if mark[-1:] != NEWLINE:
            return False
        # A source whose lines may turn blank in place while its version stays (a Gemini
        # session read as its live messages: a message rewritten later) keeps its rows:
        # a row of a line turned blank reads as blank, and every row is checked at use.
        if _hash(mark) != state.mark_hash and not getattr(fd, "blanks_in_place", False):
            return False
    return True


def _enough(state: IndexedFile, size: int, until: int | None) -> bool:
    """True if the index reaches `size`, or covers the lines before `until`."""
    return (until is not None and state.covered >= until) or state.scanned >= size


def _size(fd: ByteSource, cap: int | None) -> int:
    """The file's size now, or `cap` if that is less."""
    size = fd.stat().st_size
    return size if cap is None else min(size, cap)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An index checked against an open file: valid for that file now."""

    key: str
    state: IndexedFile


class LineIndex:
    """Builds, extends and validates line indexes in a LineIndexStore (blocking; thread-safe)."""

    def __init__(self, store: LineIndexStore, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.store = store
        self._chunk = chunk_bytes
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        # Bytes the builder read and full builds it started (for tests and benchmarks).
        self.bytes_read = 0
        self.builds = 0
        # Runs of rows already read from the store, newest used last (`_rows`).
        self._runs: OrderedDict[tuple[str, int, bool, int], tuple[list[tuple[int, int]], bool]]
        self._runs = OrderedDict()
        self._runs_lock = threading.Lock()
        self.row_queries = 0  # store queries `_rows` made (for tests)
        self._building: set[str] = set()
        self._building_lock = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._locks_lock:
            lock = self._locks.get(key)
            if lock is None:
                if len(self._locks) > 4096:
                    self._locks.clear()  # unheld locks are cheap to recreate
                lock = self._locks[key] = threading.Lock()
            return lock

    def ensure(self, key: str, fd: ByteSource) -> Snapshot:
        """The index of the open file, built or extended to its current size.

        `key` names the file in the store (its path under the transcripts root).
        Threads of one process build a file once; other processes race through
        the store's compare-and-set and carry on from each other's progress.
        """
        snapshot = self._ensure(key, fd, build=True)
        assert snapshot is not None
        return snapshot

    def current(self, key: str, fd: ByteSource) -> Snapshot | None:
        """The index of the open file as it stands, if one of this version exists.

        Never starts a build and never waits for one: None when the file was
        never indexed or was rewritten since (a caller that must stay
        O(window) reads the file then). An append of at most
        INLINE_EXTEND_BYTES is indexed here; a larger one (a long tail being
        written) is left to a background build and the snapshot covers less
        than the file (callers scan the bytes past it).
        """
        state = self.store.state(key)
        if state is None or not _continues(fd, state):
            return None
        size = fd.stat().st_size
        if state.scanned >= size:
            return Snapshot(key, state)
        if size - state.scanned <= INLINE_EXTEND_BYTES:
            cap = state.scanned + INLINE_EXTEND_BYTES  # the file may grow meanwhile
            extended = self._ensure(key, fd, build=False, wait=False, cap=cap)
            if extended is not None:
                return extended
        self.build_later(key, fd)
        return Snapshot(key, state)

    def covering(self, key: str, fd: ByteSource, until: int) -> Snapshot | None:
        """The index of the open file covering its lines before `until` (a line start).

        Built or extended on this thread as far as `until` only, so the lines
        after it (an unterminated tail) are not read; None while another
        thread holds the file's build (callers scan the bytes instead).
        """
        return self._ensure(key, fd, build=True, until=until, wait=False)

    def _ensure(
        self,
        key: str,
        fd: ByteSource,
        *,
        build: bool,
        until: int | None = None,
        wait: bool = True,
        cap: int | None = None,
    ) -> Snapshot | None:
        # An index already up to date needs no build lock: every window asks,
        # and windows of one file would otherwise queue on it.
        state = self.store.state(key)
        if state is not None and _enough(state, _size(fd, cap), until) and _continues(fd, state):
            return Snapshot(key, state)
        lock = self._lock(key)
        if not lock.acquire(blocking=wait):
            return None
        try:
            resets = 0
            while True:
                state = self.store.state(key)
                if state is None or not _continues(fd, state):
                    if not build:
                        return None
                    if resets == MAX_RESETS:
                        raise FileChangingError()
                    state = self.store.reset(key, FileVersion.of(fd))
                    resets += 1
                    self.builds += 1
                # None: another builder moved the state first (it made progress,
                # which is bounded by the file); carry on from where it is.
                reached = self._extend(key, fd, state, until, cap)
                if reached is not None:
                    return Snapshot(key, reached)
        finally:
            lock.release()

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def lines_so_far(
        self, key: str, fd: ByteSource, uuids: Sequence[str]
    ) -> tuple[list[IndexedLine], int, bool]:
        """(rows of these uuids, bytes covered, complete) from the index as built now.

        Never builds, extends or waits for a builder: a file never indexed, or
        rewritten since, gives ([], 0, False). `complete` when the index
        covers the whole file; else the lines from `covered` on are not in it.
        """
        state = self.store.state(key)
        if state is None or not _continues(fd, state):
            return [], 0, False
        lines = self.store.lines_for(key, state.generation, uuids)
        return lines, state.covered, state.scanned >= fd.stat().st_size

    def build_later(self, key: str, fd: ByteSource) -> None:
        """Build or extend the open file's index on a background thread (low priority).

        The thread has its own descriptor of the file; at most
        MAX_BACKGROUND_BUILDS files at once per process, each once. A build
        that fails is tried again by a later call.
        """
        with self._building_lock:
            if key in self._building or len(self._building) >= MAX_BACKGROUND_BUILDS:
                return
            self._building.add(key)
        try:
            own = fd.dup()
        except OSError:
            with self._building_lock:
                self._building.discard(key)
            raise

        def build() -> None:
            background_priority()
            try:
                self.ensure(key, own)
            except Exception:  # best effort: the store busy or closed, the file gone
                log.debug("a background line index build did not finish", exc_info=True)
            finally:
                own.close()
                with self._building_lock:
                    self._building.discard(key)

        threading.Thread(target=build, name="line-index-build", daemon=True).start()

    def feed(self, key: str, fd: ByteSource) -> LineFeed | None:
        """A feed to index the open file from the lines a caller reads; None if up to date.

        The caller hands it every line from `LineFeed.start` on, in file order.
        A file never indexed, or rewritten since, starts a new generation here.
        """
        state = self.store.state(key)
        if state is None or not _continues(fd, state):
            with self._lock(key):
                state = self.store.state(key)
                if state is None or not _continues(fd, state):
                    state = self.store.reset(key, FileVersion.of(fd))
                    self.builds += 1
        if state.scanned >= fd.stat().st_size:
            return None
        return LineFeed(self, key, fd, state)

    def lookup(self, key: str, fd: ByteSource, uuids: Sequence[str]) -> list[IndexedLine]:
        """The indexed lines of these uuids (callers verify each line before trusting it)."""
        snapshot = self.ensure(key, fd)
        return self.store.lines_for(key, snapshot.state.generation, uuids)

    def lines_before(self, snapshot: Snapshot, offset: int, limit: int) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` indexed lines starting before `offset`, newest first.

        Rows, not bytes: callers check each against the file before using it.
        """
        return self._rows(snapshot, offset, limit, before=True)

    def lines_from(self, snapshot: Snapshot, offset: int, limit: int) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` indexed lines from `offset` on, in file order."""
        return self._rows(snapshot, offset, limit, before=False)

    def _rows(
        self, snapshot: Snapshot, offset: int, limit: int, *, before: bool
    ) -> list[tuple[int, int]]:
        """The store's rows before (or from) `offset`, remembered: every window at one
        place asks the same.

        Within a generation the file only grows and rows are only added after
        `covered`, so the rows before an offset at or below `covered` never
        change, nor do the first rows from an offset once that many exist: a
        run answers again for as many rows as it holds (all of them, before an
        offset, when the store had fewer than asked). A new generation is a new
        key. Rows stay checked by callers against the file.
        """
        state = snapshot.state
        key = (snapshot.key, state.generation, before, offset)
        with self._runs_lock:
            found = self._runs.get(key)
            if found is not None:
                self._runs.move_to_end(key)
        if found is not None:
            rows, complete = found
            if complete or len(rows) >= limit:
                return rows[:limit]
        fetch = max(limit, ROW_RUN_MIN)
        query = self.store.lines_before if before else self.store.lines_from
        rows = query(snapshot.key, state.generation, offset, fetch)
        self.row_queries += 1
        if not before or offset <= state.covered:
            # Fewer rows than asked before an offset: there are no more. From an
            # offset, more may come as the file grows.
            complete = before and len(rows) < fetch
            with self._runs_lock:
                self._runs[key] = (rows, complete)
                self._runs.move_to_end(key)
                while len(self._runs) > ROW_RUNS:
                    self._runs.popitem(last=False)
        return rows[:limit]

    def last_line_start(self, key: str, fd: ByteSource, size: int) -> int:
        """Where the last line of the file's first `size` bytes starts (`size` if none is open).

        The file may have grown past `size` since the caller looked: then the
        answer is the last indexed line start at or before `size`.
        """
        state = self.ensure(key, fd).state
        if state.covered <= size:
            # The index reached past `size`: no newline in [covered, size).
            return state.covered
        start = self.store.line_start_before(key, state.generation, size - 1)
        return 0 if start is None else start

    def indexed_last_line_start(
        self, key: str, fd: ByteSource, size: int, clear_from: int | None = None
    ) -> int | None:
        """`last_line_start` from an index that already covers `size` bytes; else None.

        `clear_from`: the caller saw no newline in [clear_from, size), so an
        index scanned as far as `clear_from` answers too (a tail still being
        written outgrows the last build). Never builds nor extends the index,
        so it costs a store query or two whatever the file holds (a caller
        bounded to O(window) asks this).
        """
        state = self.store.state(key)
        needed = size if clear_from is None else min(size, clear_from)
        if state is None or state.scanned < needed or not _continues(fd, state):
            return None
        if state.covered <= size:
            return state.covered
        start = self.store.line_start_before(key, state.generation, size - 1)
        return 0 if start is None else start

    def _extend(
        self,
        key: str,
        fd: ByteSource,
        state: IndexedFile,
        until: int | None = None,
        cap: int | None = None,
    ) -> IndexedFile | None:
        """Index from where `state` stopped to EOF (or until it covers `until`, or to `cap`
        bytes); None if another builder moved it first."""
        if _enough(state, _size(fd, cap), until):
            # Up to date (every window asks): no chunk buffer is allocated.
            return state
        buffer = bytearray(self._chunk)
        view = memoryview(buffer)
        try:
            while True:
                size = _size(fd, cap)
                if _enough(state, size, until):
                    return state
                foreground.step_aside()
                count = 0
                # A tail already known to be longer than a chunk is not read again.
                if state.scanned - state.covered < self._chunk:
                    count = LineFile(fd).read_into(
                        view[: min(self._chunk, size - state.covered)], state.covered
                    )
                    self.bytes_read += count
                last = last_newline(buffer, count) if count else -1
                lines: list[IndexedLine] = []
                if last >= 0:
                    lines = chunk_lines(buffer, last + 1, state.covered)
                    reached = self._reached(fd, state, state.covered + last + 1, None)
                elif 0 < count < self._chunk:
                    # An unterminated tail shorter than a chunk: remember it was scanned.
                    reached = self._reached(fd, state, state.covered, state.covered + count)
                else:
                    # A line longer than a chunk (or a tail already known to be long).
                    from_ = max(state.covered + count, state.scanned)
                    end, scanned = self._long_line(fd, buffer, view, from_, size)
                    if end is not None:
                        lines = [long_line_entry(fd, len(buffer), state.covered, end)]
                    covered = state.covered if end is None else end + 1
                    reached = self._reached(fd, state, covered, scanned)
                if not self.store.append(key, state, lines, reached):
                    return None
                state = reached
        finally:
            view.release()

    def _reached(
        self, fd: ByteSource, state: IndexedFile, covered: int, scanned: int | None
    ) -> IndexedFile:
        mark_len = min(MARK_BYTES, covered)
        mark = LineFile(fd).read(mark_len, covered - mark_len) if mark_len else b""
        return IndexedFile(
            state.generation,
            state.version,
            covered,
            covered if scanned is None else scanned,
            mark_len,
            _hash(mark) if mark_len else "",
        )

    def _long_line(
        self, fd: ByteSource, buffer: bytearray, view: memoryview, position: int, size: int
    ) -> tuple[int | None, int]:
        """Find the newline ending a long line from `position`: (its offset or None, scanned)."""
        limit = min(size, position + 64 * self._chunk)  # commit progress now and then
        search = NewlineSearch(buffer)
        try:
            while position < limit:
                foreground.step_aside()
                piece = min(self._chunk, LONG_LINE_PIECE_BYTES, limit - position)
                count = LineFile(fd).read_into(view[:piece], position)
                if count <= 0:
                    break
                self.bytes_read += count
                found = search.find(count)
                if found >= 0:
                    return position + found, position + found + 1
                position += count
            return None, position
        finally:
            search.close()


class LineFeed:
    """Indexes a file's lines as a caller reads them (`LineIndex.feed`).

    The lines held in memory are gathered into a buffer of about FEED_BYTES
    and indexed as a chunk is (`_chunk_lines`: C-level scans of the whole
    buffer); a line too long to hold is read for its uuid and markers as the
    builder reads one. Rows are written in batches of FEED_ROWS, each a
    compare-and-set on the store's state: when another builder moved the state
    first, the feed stops (`active` turns False) and leaves the file to it.
    """

    def __init__(self, index: LineIndex, key: str, fd: ByteSource, state: IndexedFile) -> None:
        self._index = index
        self._key = key
        self._fd = fd
        self._state = state
        self._rows: list[IndexedLine] = []
        self._buffer = bytearray()
        self._base = self._covered = state.covered
        self._scanned: int | None = None
        self.active = True

    @property
    def start(self) -> int:
        """Where the caller's lines must start (a line start: the index's covered end)."""
        return self._state.covered

    def line(self, start: int, end: int, data: bytes | None, terminated: bool) -> None:
        """One line [start, end), newline excluded; `data` its bytes, or None if too long to hold."""
        if not self.active or start < self._covered:
            return
        if not terminated:
            # The tail being written: remembered as scanned, indexed once it ends.
            self._scanned = end
            return
        if data is None:
            self._gather()
            self._rows.append(long_line_entry(self._fd, self._index._chunk, start, end))
            self._covered = self._base = end + 1
        else:
            self._buffer += data
            self._buffer += NEWLINE
            self._covered = end + 1
            if len(self._buffer) >= FEED_BYTES:
                self._gather()
        if len(self._rows) >= FEED_ROWS:
            self._write()

    def finish(self) -> IndexedFile | None:
        """Write what is left; the state reached (None if another builder took over)."""
        scanned = self._scanned is not None and self._scanned > self._state.scanned
        if self.active and (self._buffer or self._covered > self._state.covered or scanned):
            self._write()
        return self._state if self.active else None

    def _gather(self) -> None:
        if self._buffer:
            self._rows.extend(chunk_lines(self._buffer, len(self._buffer), self._base))
            self._buffer = bytearray()
        self._base = self._covered

    def _write(self) -> None:
        self._gather()
        reached = self._index._reached(self._fd, self._state, self._covered, self._scanned)
        if self._index.store.append(self._key, self._state, self._rows, reached):
            self._state = reached
        else:
            self.active = False
        self._rows = []
