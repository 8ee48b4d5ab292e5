"""Windows (pages) of a transcript: latest-first or oldest-first, with opaque tokens.

A window is read from one file version: the file is opened, its identity taken
(and checked against the token's), and only the bytes up to the size seen then
are read. Its lines are found through the persisted line index
(scrollback.lineindex) when there is one for this file version: each indexed
row is checked against the file before it is served, and the first row that
does not match (or the end of the rows) hands over to the byte scan, which
reads backwards from the window's end in blocks (latest-first) or forwards
from its start (oldest-first). Either way a window costs O(window), whatever
the file's size (a page token's first use on a file never indexed builds its
index once). A window ends early once it scanned its byte budget (its token
continues).

A window holds plain values: the records it serves (`Record`: a `ServedLine`,
or whatever a `LineServer` wrapped around the window's own gives for a line,
such as history_service.entry_cache's encoded entries) and the places of
records too large to hold (`HeldBack`). How they go on the wire is
history_service.window_wire's business. The blocking work (open, check, scan)
runs in one worker thread, off the event loop: one hop per window.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from history_service.errors import FileRewrittenError, InvalidArgumentError, LongTailPendingError
from history_service.lines import (
    FileShrankError,
    MediaMode,
    RawLine,
    ServedLine,
    is_blank,
    iter_indexed,
    iter_lines_backward,
    iter_lines_forward,
    serve_line,
)
from history_service.tokens import (
    DIRECTION_LATEST_FIRST,
    DIRECTION_OLDEST_FIRST,
    PageToken,
    TokenCodec,
)
from scrollback.contract.stripping import MIN_INLINE_LIMIT
from scrollback.linefile import ByteSource, FileIdentity, FileVersion, LineFile
from scrollback.lineindex import INDEX_UNAVAILABLE, LineIndex, Snapshot
from scrollback.linewalk import IndexRows, KnownLines, Probe
from scrollback.principals import Principal
from scrollback.transcripts import Stamp, TranscriptFile, TranscriptSource, stamp_of

MAX_PAGE_SIZE = 200
log = logging.getLogger(__name__)
# A served entry whose json is larger is not kept in its window (see HeldBack).
_HOLD_BACK_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class WindowParams:
    """A validated window request."""

    session_id: str
    page_size: int
    page_token: str
    direction: int
    mode: MediaMode
    inline_limit: int


class Record(Protocol):
    """A record a window serves, as it holds it: where its line is, and what it became.

    A `ServedLine`, or what a `LineServer` wrapped around the window's own
    gives instead (history_service.window_wire's `EncodedEntry`, from the
    entry cache); history_service.window_wire tells them apart.
    """

    @property
    def offset(self) -> int: ...

    @property
    def line_size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class HeldBack:
    """An entry too large to keep in a window: served again from its file when sent."""

    offset: int
    line_size: int


# One entry of a window: a record served, or the place of one held back.
WindowEntry = Record | HeldBack


@dataclass(frozen=True, slots=True)
class Serving:
    """What one window serves: a file version's lines as one request strips them."""

    version: FileVersion
    session_id: str
    mode: MediaMode
    inline_limit: int
    # The file's stamp when opened, if it had settled (scrollback.transcripts.stamp_of).
    stamp: Stamp | None


class LineServer(Protocol):
    """How a window's scan turns its lines into entries.

    `serve(raw)`: the line's entry, None when it is not a JSON object (skipped).
    `probe`: answers for an indexed line before its bytes are read (None: never).
    """

    @property
    def probe(self) -> Probe[Record] | None: ...

    def serve(self, raw: RawLine) -> WindowEntry | None: ...


# Wraps a window's own LineServer (history_service.entry_cache.EntryCache.wrap).
ServerWrap = Callable[[LineServer, Serving], LineServer]


class PlainServer:
    """A window's own LineServer: each line stripped (`serve_line`), large ones held back."""

    probe: Probe[Record] | None = None

    def __init__(self, mode: MediaMode, inline_limit: int, max_line_size: int) -> None:
        self.mode = mode
        self.inline_limit = inline_limit
        self.max_line_size = max_line_size

    def line(self, raw: RawLine) -> ServedLine | None:
        """The line as served, whatever its size; None if it is not a JSON object."""
        return serve_line(raw, self.mode, self.inline_limit, self.max_line_size)

    def serve(self, raw: RawLine) -> ServedLine | HeldBack | None:
        """The line's entry: itself if small; else only its place (a served oversize stub stays)."""
        served = serve_line(raw, self.mode, self.inline_limit, self.max_line_size)
        if served is None:
            return None
        if len(served.stripped.json) <= _HOLD_BACK_BYTES or served.stripped.oversize:
            return served
        return HeldBack(served.offset, served.line_size)


class _SharedFile:
    """An fd of the window's file version, closed when the last window holding it goes."""

    def __init__(self, fd: ByteSource) -> None:
        self.fd = fd.dup()

    def __del__(self) -> None:
        self.fd.close()


@dataclass(frozen=True, slots=True)
class _Reread:
    """What serving a held-back entry again needs: the window's file and its server."""

    file: _SharedFile
    server: PlainServer


@dataclass(frozen=True, slots=True)
class Window:
    """One page: entries in file order, and how to go on.

    Large entries are `HeldBack` (only their place), so a window holds at
    most one large entry at a time: `materialize` serves it again from the
    same file version when it is sent.
    """

    entries: tuple[WindowEntry, ...]
    skipped_lines: int
    file_size: int
    next_page_token: str
    identity: FileIdentity
    # The end of the newest complete line this window could serve: where a
    # watch continues after a latest-first first page.
    newest_end: int
    reread: _Reread | None = None
    # The file's stamp when opened, if it had settled (scrollback.transcripts.stamp_of).
    stamp: Stamp | None = None

    def materialize(self, entry: HeldBack) -> ServedLine:
        """A held-back entry as served (blocking: read and stripped again)."""
        assert self.reread is not None
        fd, server = self.reread.file.fd, self.reread.server
        end = entry.offset + entry.line_size
        if entry.line_size > server.max_line_size:
            raw = RawLine(entry.offset, end, None, True, fd)  # stripped streaming
        else:
            data = LineFile(fd).read(entry.line_size, entry.offset)
            if len(data) != entry.line_size:
                raise FileShrankError()
            raw = RawLine(entry.offset, end, data, True)
        served = server.line(raw)
        if served is None:
            raise FileRewrittenError()
        return served


def validate_params(
    session_id: str,
    page_size: int,
    page_token: str,
    direction: int,
    mode: int,
    inline_limit: int,
    *,
    default_inline_limit: int,
    max_line_size: int,
) -> WindowParams:
    """Check and normalize a window request (raises InvalidArgumentError)."""
    if page_size < 0:
        raise InvalidArgumentError("page_size must not be negative")
    size = MAX_PAGE_SIZE if page_size == 0 else min(page_size, MAX_PAGE_SIZE)
    if direction == 0:
        direction = DIRECTION_LATEST_FIRST
    if direction not in (DIRECTION_LATEST_FIRST, DIRECTION_OLDEST_FIRST):
        raise InvalidArgumentError("unknown read direction")
    media = validate_mode(mode)
    limit = validate_inline_limit(inline_limit, default_inline_limit, max_line_size)
    return WindowParams(session_id, size, page_token, direction, media, limit)


def validate_mode(mode: int) -> MediaMode:
    """The media mode of a request (0 = DEFERRED)."""
    if mode == 0:
        return MediaMode.DEFERRED
    try:
        return MediaMode(mode)
    except ValueError:
        raise InvalidArgumentError("unknown media mode") from None


def validate_inline_limit(value: int, default: int, max_line_size: int) -> int:
    """The inline limit of a request (0 = the server default)."""
    if value == 0:
        return default
    if not MIN_INLINE_LIMIT <= value <= max_line_size:
        raise InvalidArgumentError("inline_limit_bytes is outside the server's bounds")
    return value


@dataclass(frozen=True, slots=True)
class _Opened:
    fd: ByteSource
    identity: FileIdentity
    token: PageToken | None
    # The transcript's name in the line index (its path under the root).
    index_key: str = ""
    transcript: TranscriptFile | None = None
    # The file's stamp when opened, if it had settled (scrollback.transcripts.stamp_of).
    stamp: Stamp | None = None


class WindowReader:
    """Reads windows of the transcripts under one root."""

    def __init__(
        self,
        root: TranscriptSource,
        codec: TokenCodec,
        *,
        max_line_size: int,
        max_window_bytes: int,
        line_index: LineIndex | None = None,
        wrap: ServerWrap | None = None,
    ) -> None:
        self._root = root
        self.line_index = line_index
        self.codec = codec
        self.max_line_size = max_line_size
        self.max_window_bytes = max_window_bytes
        self._wrap = wrap
        # Windows scanned (for tests and benchmarks; windows run on several threads at once).
        self.scans = 0
        self._scans_lock = threading.Lock()

    def read_with_transcript(
        self, principal: Principal | None, params: WindowParams
    ) -> tuple[Window, TranscriptFile]:
        """One window as `principal` may see it, and the transcript the session resolved to.

        Blocking (open, check, find and serve the lines): callers run it off the event
        loop in one hop. Raises the domain errors of the contract.
        """
        opened = self._open(principal, params)
        assert opened.transcript is not None
        try:
            with self._scans_lock:
                self.scans += 1
            window = _Scan(self, opened, params, self._server(opened, params)).window()
        finally:
            opened.fd.close()
        return window, opened.transcript

    def _server(self, opened: _Opened, params: WindowParams) -> LineServer:
        """The window's LineServer: its own, wrapped (the entry cache) if the reader has a wrap."""
        own = PlainServer(params.mode, params.inline_limit, self.max_line_size)
        if self._wrap is None:
            return own
        serving = Serving(
            opened.identity.version,
            params.session_id,
            params.mode,
            params.inline_limit,
            opened.stamp,
        )
        return self._wrap(own, serving)

    def _open(self, principal: Principal | None, params: WindowParams) -> _Opened:
        token = (
            self.codec.parse_page_token(params.session_id, params.page_token)
            if params.page_token
            else None
        )
        transcript = self._root.resolve(params.session_id, principal)
        fd = open_transcript(self._root, transcript)
        try:
            # Before any byte is read: a write after this changes the stamp.
            stamp = stamp_of(fd.stat())
            if token is not None:
                identity = token.identity.check(fd, token.boundary, self._root.version)
                token.check_mark(fd)
            else:
                identity = FileIdentity.of(fd, self._root.version)
        except BaseException:
            fd.close()
            raise
        return _Opened(
            fd,
            identity,
            token,
            self._root.key_of(transcript),
            transcript,
            stamp,
        )


@dataclass(frozen=True, slots=True)
class _Taken:
    """What `_Scan.take` read: lines skipped, where the last line taken starts and where the
    next one does (None when none was), and whether the lines ran out."""

    skipped: int
    first: int | None
    after: int | None
    exhausted: bool


class _Scan:
    """One window's scan of an opened file: where its lines are found, how they are taken,
    and the window they make.

    The lines come from the file's line index when it has one for this file
    version (`_rows_before` / `_rows_from`), else from the byte scan; each is
    turned into an entry by the window's `LineServer`.
    """

    def __init__(
        self, reader: WindowReader, opened: _Opened, params: WindowParams, server: LineServer
    ) -> None:
        self.reader = reader
        self.opened = opened
        self.params = params
        self.server = server
        token = opened.token
        self.direction = token.direction if token else params.direction
        self.boundary = token.boundary if token else -1
        self.snapshot: Snapshot | None = None

    def window(self) -> Window:
        """Scan the window (in its direction) and give it, holding its file if an entry was held back."""
        self.snapshot = self._index_snapshot()
        if self.direction == DIRECTION_OLDEST_FIRST:
            window = self.forward(max(self.boundary, 0))
        else:
            window = self.backward(self.boundary)
        if not any(isinstance(entry, HeldBack) for entry in window.entries):
            return window
        own = PlainServer(self.params.mode, self.params.inline_limit, self.reader.max_line_size)
        return dataclasses.replace(window, reread=_Reread(_SharedFile(self.opened.fd), own))

    def _index_snapshot(self) -> Snapshot | None:
        """The file's line index to find lines with; None to scan bytes instead.

        A page token's window builds the index on the file's first touch as far
        as its boundary (one pass; later pages and restarts reuse it). A first
        page only uses an index that already exists for this file version
        (extended by a short append), so a first page stays O(window) on a file
        never seen. Neither waits for a background build nor reads an
        unterminated tail (the byte scan serves meanwhile). The store failing
        at any point means the byte scan, never an error.
        """
        index, opened = self.reader.line_index, self.opened
        if index is None or not opened.index_key or isinstance(opened.fd, KnownLines):
            return None  # a source that knows its lines needs no index (`_lines`)
        try:
            if opened.token is not None:
                return index.covering(opened.index_key, opened.fd, opened.token.boundary)
            found = index.current(opened.index_key, opened.fd)
            if found is None:
                # The window goes on with the byte scan (a first page stays O(window)).
                index.build_later(opened.index_key, opened.fd)
            return found
        except INDEX_UNAVAILABLE:
            return None

    def _rows_before(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """Indexed rows before `offset`, newest first (none if the store fails: the byte scan)."""
        assert self.reader.line_index is not None and self.snapshot is not None
        try:
            return self.reader.line_index.lines_before(self.snapshot, offset, limit)
        except INDEX_UNAVAILABLE:
            return []

    def _rows_from(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """Indexed rows from `offset` on, in file order (none if the store fails)."""
        assert self.reader.line_index is not None and self.snapshot is not None
        try:
            return self.reader.line_index.lines_from(self.snapshot, offset, limit)
        except INDEX_UNAVAILABLE:
            return []

    def _long_tail_start(self) -> int:
        """Where a tail longer than the max line size starts, from the line index.

        Only an index that already covers the file answers: finding that start
        otherwise means reading the whole tail (gigabytes, for a run with no
        newline), so the window is refused as UNAVAILABLE (`LongTailPendingError`,
        which clients retry) while a background build indexes the file.
        """
        index, opened = self.reader.line_index, self.opened
        assert index is not None
        size = opened.identity.size
        # tail_start asks only after it found no newline in the last max line size.
        clear_from = max(0, size - self.reader.max_line_size - 1)
        try:
            start = index.indexed_last_line_start(opened.index_key, opened.fd, size, clear_from)
        except INDEX_UNAVAILABLE:
            start = None
        if start is None:
            index.build_later(opened.index_key, opened.fd)
            raise LongTailPendingError()
        return start

    def _lines(self, start: int, end: int, *, backward: bool) -> Iterator[RawLine | Record]:
        """The lines of [start, end) in reading order: through the index if there is one."""
        fd, max_line = self.opened.fd, self.reader.max_line_size
        rows: IndexRows | None = None
        if self.snapshot is not None:
            rows = self._rows_before if backward else self._rows_from
        elif isinstance(fd, KnownLines):
            # Its own rows, checked as an index's are: O(window) from the first page on.
            rows = fd.lines_before if backward else fd.lines_from
        if rows is None:
            if backward:
                return iter_lines_backward(fd, end, max_line)
            return iter_lines_forward(fd, start, end, max_line)
        return iter_indexed(
            fd,
            start,
            end,
            max_line,
            rows,
            backward=backward,
            probe=self.server.probe,
            batch=self.params.page_size + 8,
        )

    def backward(self, boundary: int) -> Window:
        """The latest-first window ending at `boundary` (-1: at the file's end, its tail first)."""
        fd, identity = self.opened.fd, self.opened.identity
        size = identity.size
        newest: list[WindowEntry] = []
        scanned = 0
        if boundary < 0:
            long_tail = None if self.reader.line_index is None else self._long_tail_start
            start = LineFile(fd).tail_start(size, self.reader.max_line_size, long_tail)
            newest_end = start
            if start < size and size - start <= self.reader.max_line_size:
                data = LineFile(fd).read(size - start, start)
                tail = self.server.serve(RawLine(start, start + len(data), data, False))
                if tail is not None:
                    newest.append(tail)
                    newest_end = size
                    scanned += len(data)
            end = start
        else:
            end = newest_end = boundary
        taken = self.take(self._lines(0, end, backward=True), newest, scanned)
        oldest = end if taken.first is None else taken.first
        newest.reverse()
        token = ""
        if oldest > 0:
            token = self.reader.codec.page_token(
                self.params.session_id,
                PageToken.at(DIRECTION_LATEST_FIRST, identity, oldest, fd),
            )
        return Window(
            tuple(newest),
            taken.skipped,
            size,
            token,
            identity,
            newest_end,
            stamp=self.opened.stamp,
        )

    def forward(self, boundary: int) -> Window:
        """The oldest-first window starting at `boundary`."""
        fd, identity = self.opened.fd, self.opened.identity
        size = identity.size
        entries: list[WindowEntry] = []
        taken = self.take(self._lines(boundary, size, backward=False), entries, 0)
        position = boundary if taken.after is None else taken.after
        token = ""
        if not taken.exhausted and position < size:
            token = self.reader.codec.page_token(
                self.params.session_id,
                PageToken.at(DIRECTION_OLDEST_FIRST, identity, position, fd),
            )
        return Window(
            tuple(entries), taken.skipped, size, token, identity, position, stamp=self.opened.stamp
        )

    def take(
        self, lines: Iterator[RawLine | Record], entries: list[WindowEntry], scanned: int
    ) -> _Taken:
        """Take lines, in the order `lines` gives them, into `entries` until the page is
        full, the window's byte budget is spent or the lines end.

        Both directions read through here. Only a forward scan meets the unterminated
        last line: it is served if it is a complete object, and ends the scan.
        """
        page_size, budget, serve = (
            self.params.page_size,
            self.reader.max_window_bytes,
            self.server.serve,
        )
        skipped = 0
        first: int | None = None  # where the last line taken starts
        after: int | None = None  # where the line after it starts
        while len(entries) < page_size and scanned < budget:
            raw = next(lines, None)
            if raw is None:
                return _Taken(skipped, first, after, True)
            if not isinstance(raw, RawLine):
                # An indexed line the server answered for without its bytes (a cached entry).
                scanned += raw.line_size + 1
                first, after = raw.offset, raw.offset + raw.line_size + 1
                entries.append(raw)
                continue
            scanned += raw.size + 1
            if not raw.terminated:
                tail = None if is_blank(raw) or raw.data is None else serve(raw)
                if tail is not None:
                    entries.append(tail)
                    after = raw.end
                return _Taken(skipped, first, after, True)
            first, after = raw.start, raw.next_start
            if is_blank(raw):
                continue
            entry = serve(raw)
            if entry is None:
                skipped += 1
            else:
                entries.append(entry)
        return _Taken(skipped, first, after, False)


def open_transcript(root: TranscriptSource, transcript: TranscriptFile) -> ByteSource:
    """Open a resolved transcript (jailed, through TranscriptSource) as a byte source."""
    return root.open(transcript)
