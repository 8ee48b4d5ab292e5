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
index once). Entries are kept only as stripped lines,
and a window ends early once it scanned its byte budget (its token continues).

Identical concurrent reads of the same window of the same file version share
one scan (single-flight); failures are never cached. The blocking work (open,
check, scan) runs in one worker thread, off the event loop: one hop per window.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from history_service.entry_cache import (
    EncodedEntry,
    EntryCache,
    Scope,
    encode,
    mark_of,
)
from history_service.errors import FileRewrittenError, InvalidArgumentError, LongTailPendingError
from history_service.lines import (
    FileShrankError,
    IndexRows,
    MediaMode,
    RawLine,
    RowReads,
    ServedLine,
    is_blank,
    iter_indexed,
    iter_lines_backward,
    iter_lines_forward,
    serve_line,
)
from history_service.singleflight import ThreadSingleFlight
from history_service.tokens import (
    DIRECTION_LATEST_FIRST,
    DIRECTION_OLDEST_FIRST,
    PageToken,
    TokenCodec,
)
from scrollback.contract.stripping import MIN_INLINE_LIMIT
from scrollback.linefile import ByteSource, FileIdentity, LineFile
from scrollback.lineindex import INDEX_UNAVAILABLE, LineIndex
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


@dataclass(frozen=True, slots=True)
class HeldBack:
    """An entry too large to keep in a window: served again from its file when sent."""

    offset: int
    line_size: int


class _SharedFile:
    """An fd of the window's file version, closed when the last window holding it goes."""

    def __init__(self, fd: ByteSource) -> None:
        self.fd = fd.dup()

    def __del__(self) -> None:
        self.fd.close()


@dataclass(frozen=True, slots=True)
class Window:
    """One page: entries in file order, and how to go on.

    Large entries are `HeldBack` (only their place), so a window holds at
    most one large entry at a time: `materialize` serves it again from the
    same file version when it is sent.
    """

    entries: tuple[ServedLine | HeldBack | EncodedEntry, ...]
    skipped_lines: int
    file_size: int
    next_page_token: str
    identity: FileIdentity
    # The end of the newest complete line this window could serve: where a
    # watch continues after a latest-first first page.
    newest_end: int
    serve: Callable[[RawLine], ServedLine | None] | None = None
    file: _SharedFile | None = None
    max_line_size: int = 0

    def materialize(self, entry: ServedLine | HeldBack) -> ServedLine:
        """The entry as served (blocking: a held-back one is read and stripped again)."""
        if isinstance(entry, ServedLine):
            return entry
        assert self.file is not None and self.serve is not None
        end = entry.offset + entry.line_size
        if entry.line_size > self.max_line_size:
            raw = RawLine(entry.offset, end, None, True, self.file.fd)  # stripped streaming
        else:
            data = LineFile(self.file.fd).read(entry.line_size, entry.offset)
            if len(data) != entry.line_size:
                raise FileShrankError()
            raw = RawLine(entry.offset, end, data, True)
        served = self.serve(raw)
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
        entry_cache: EntryCache | None = None,
    ) -> None:
        self._root = root
        self._line_index = line_index
        self.entry_cache = entry_cache if entry_cache is not None and entry_cache.enabled else None
        self._codec = codec
        self._max_line_size = max_line_size
        self._max_window_bytes = max_window_bytes
        self.flights: ThreadSingleFlight[Window] = ThreadSingleFlight()

    def read_with_transcript(
        self, principal: Principal | None, params: WindowParams
    ) -> tuple[Window, TranscriptFile]:
        """One window as `principal` may see it, and the transcript the session resolved to.

        Blocking (open, check, find and serve the lines): callers run it off the event
        loop in one hop. Raises the domain errors of the contract.
        """
        opened = self._open(principal, params)
        assert opened.transcript is not None
        token = opened.token
        direction = token.direction if token else params.direction
        boundary = token.boundary if token else -1
        key = (
            opened.identity.version,
            opened.identity.size,
            direction,
            boundary,
            params.page_size,
            params.mode,
            params.inline_limit,
            params.session_id,
        )
        try:
            window, _shared = self.flights.do(
                key, lambda: self._scan(opened, params, direction, boundary)
            )
        finally:
            opened.fd.close()
        return window, opened.transcript

    def _open(self, principal: Principal | None, params: WindowParams) -> _Opened:
        token = (
            self._codec.parse_page_token(params.session_id, params.page_token)
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

    def _scan(self, opened: _Opened, params: WindowParams, direction: int, boundary: int) -> Window:
        serve = _server(params, self._max_line_size)
        rows = self._index_rows(opened)
        take = self._taker(opened, params, serve)
        if direction == DIRECTION_OLDEST_FIRST:
            window = self._scan_forward(opened, params, max(boundary, 0), serve, rows, take)
        else:
            window = self._scan_backward(opened, params, boundary, serve, rows, take)
        if not any(isinstance(entry, HeldBack) for entry in window.entries):
            return window
        return dataclasses.replace(
            window, serve=serve, file=_SharedFile(opened.fd), max_line_size=self._max_line_size
        )

    def _taker(
        self,
        opened: _Opened,
        params: WindowParams,
        serve: Callable[[RawLine], ServedLine | None],
    ) -> _Take:
        """How the window takes its lines: cached entries first, else served (and cached)."""
        cache = self.entry_cache
        if cache is None:
            return _Take(_uncached(serve), None)
        identity, session_id = opened.identity, params.session_id
        scope: Scope = (
            identity.version,
            session_id,
            int(params.mode),
            params.inline_limit,
        )

        stamp = opened.stamp

        def probe(offset: int, length: int, reads: RowReads) -> EncodedEntry | None:
            """A cached entry of an indexed line, if it is still current (entry_cache)."""
            return cache.lookup(scope, offset, length, stamp, lambda: reads.mark(offset, length))

        def take(raw: RawLine) -> ServedLine | HeldBack | EncodedEntry | None:
            whole = raw.terminated and raw.data is not None
            mark = 0
            if whole:
                assert raw.data is not None
                mark = mark_of(raw.start, raw.data)
                found = cache.lookup(scope, raw.start, raw.size, stamp, lambda: mark)
                if found is not None:
                    return found
            served = serve(raw)
            if served is None:
                return None
            if (
                whole
                and not served.stripped.oversize
                and len(served.stripped.json) <= _HOLD_BACK_BYTES
            ):
                encoded = encode(session_id, served)
                cache.put(scope, mark, encoded, stamp)
                return encoded
            return _light(served)

        return _Take(take, probe)

    def _index_rows(self, opened: _Opened) -> tuple[IndexRows, IndexRows] | None:
        """Row readers (before, from) of the file's line index; None to scan bytes instead.

        A page token's window builds the index on the file's first touch (one
        pass; later pages and restarts reuse it). A first page only uses an
        index that already exists for this file version (extended by what was
        appended since), so a first page stays O(window) on a file never seen.
        The store failing at any point means the byte scan, never an error.
        """
        index = self._line_index
        if index is None or not opened.index_key:
            return None
        try:
            if opened.token is not None:
                snapshot = index.ensure(opened.index_key, opened.fd)
            else:
                found = index.current(opened.index_key, opened.fd)
                if found is None:
                    # The window goes on with the byte scan (a first page stays O(window)).
                    index.build_later(opened.index_key, opened.fd)
                    return None
                snapshot = found
        except INDEX_UNAVAILABLE:
            return None

        def before(offset: int, limit: int) -> list[tuple[int, int]]:
            try:
                return index.lines_before(snapshot, offset, limit)
            except INDEX_UNAVAILABLE:
                return []

        def from_(offset: int, limit: int) -> list[tuple[int, int]]:
            try:
                return index.lines_from(snapshot, offset, limit)
            except INDEX_UNAVAILABLE:
                return []

        return before, from_

    def _long_tail(self, opened: _Opened, size: int) -> Callable[[], int] | None:
        """Where a tail longer than the max line size starts, from the line index.

        Only an index that already covers the file answers: finding that start
        otherwise means reading the whole tail (gigabytes, for a run with no
        newline), so the window is refused as UNAVAILABLE (`LongTailPendingError`,
        which clients retry) while a background build indexes the file.
        """
        index = self._line_index
        if index is None:
            return None

        def locate() -> int:
            try:
                start = index.indexed_last_line_start(opened.index_key, opened.fd, size)
            except INDEX_UNAVAILABLE:
                start = None
            if start is None:
                index.build_later(opened.index_key, opened.fd)
                raise LongTailPendingError()
            return start

        return locate

    def _scan_backward(
        self,
        opened: _Opened,
        params: WindowParams,
        boundary: int,
        serve: Callable[[RawLine], ServedLine | None],
        rows: tuple[IndexRows, IndexRows] | None,
        take: _Take,
    ) -> Window:
        fd, identity = opened.fd, opened.identity
        size = identity.size
        newest: list[ServedLine | HeldBack | EncodedEntry] = []
        scanned = 0
        if boundary < 0:
            start = LineFile(fd).tail_start(
                size, self._max_line_size, self._long_tail(opened, size)
            )
            newest_end = start
            if start < size and size - start <= self._max_line_size:
                data = LineFile(fd).read(size - start, start)
                tail = serve(RawLine(start, start + len(data), data, False))
                if tail is not None:
                    newest.append(_light(tail))
                    newest_end = size
                    scanned += len(data)
            end = start
        else:
            end = newest_end = boundary
        lines = (
            iter_lines_backward(fd, end, self._max_line_size)
            if rows is None
            else iter_indexed(
                fd,
                0,
                end,
                self._max_line_size,
                rows[0],
                backward=True,
                probe=take.probe,
                batch=params.page_size + 8,
            )
        )
        taken = self._take_lines(lines, newest, scanned, params.page_size, serve, take)
        oldest = end if taken.first is None else taken.first
        newest.reverse()
        token = ""
        if oldest > 0:
            token = self._codec.page_token(
                params.session_id, PageToken.at(DIRECTION_LATEST_FIRST, identity, oldest, fd)
            )
        return Window(tuple(newest), taken.skipped, size, token, identity, newest_end)

    def _scan_forward(
        self,
        opened: _Opened,
        params: WindowParams,
        boundary: int,
        serve: Callable[[RawLine], ServedLine | None],
        rows: tuple[IndexRows, IndexRows] | None,
        take: _Take,
    ) -> Window:
        fd, identity = opened.fd, opened.identity
        size = identity.size
        entries: list[ServedLine | HeldBack | EncodedEntry] = []
        lines = (
            iter_lines_forward(fd, boundary, size, self._max_line_size)
            if rows is None
            else iter_indexed(
                fd,
                boundary,
                size,
                self._max_line_size,
                rows[1],
                backward=False,
                probe=take.probe,
                batch=params.page_size + 8,
            )
        )
        taken = self._take_lines(lines, entries, 0, params.page_size, serve, take)
        position = boundary if taken.after is None else taken.after
        token = ""
        if not taken.exhausted and position < size:
            token = self._codec.page_token(
                params.session_id, PageToken.at(DIRECTION_OLDEST_FIRST, identity, position, fd)
            )
        return Window(tuple(entries), taken.skipped, size, token, identity, position)

    def _take_lines(
        self,
        lines: Iterator[RawLine | EncodedEntry],
        entries: list[ServedLine | HeldBack | EncodedEntry],
        scanned: int,
        page_size: int,
        serve: Callable[[RawLine], ServedLine | None],
        take: _Take,
    ) -> _Taken:
        """Take lines, in the order `lines` gives them, into `entries` until the page is
        full, the window's byte budget is spent or the lines end.

        Both directions read through here. Only a forward scan meets the unterminated
        last line: it is served if it is a complete object, and ends the scan.
        """
        skipped = 0
        first: int | None = None  # where the last line taken starts
        after: int | None = None  # where the line after it starts
        while len(entries) < page_size and scanned < self._max_window_bytes:
            raw = next(lines, None)
            if raw is None:
                return _Taken(skipped, first, after, True)
            if isinstance(raw, EncodedEntry):
                # An indexed line whose entry was cached (its mark checked).
                scanned += raw.line_size + 1
                first, after = raw.offset, raw.offset + raw.line_size + 1
                entries.append(raw)
                continue
            scanned += raw.size + 1
            if not raw.terminated:
                tail = None if is_blank(raw) or raw.data is None else serve(raw)
                if tail is not None:
                    entries.append(_light(tail))
                    after = raw.end
                return _Taken(skipped, first, after, True)
            first, after = raw.start, raw.next_start
            if is_blank(raw):
                continue
            entry = take.take(raw)
            if entry is None:
                skipped += 1
            else:
                entries.append(entry)
        return _Taken(skipped, first, after, False)


@dataclass(frozen=True, slots=True)
class _Taken:
    """What `_take_lines` read: lines skipped, where the last line taken starts and where the
    next one does (None when none was), and whether the lines ran out."""

    skipped: int
    first: int | None
    after: int | None
    exhausted: bool


@dataclass(frozen=True, slots=True)
class _Take:
    """How a scan turns a line into a window entry, and finds a cached one before reading it."""

    take: Callable[[RawLine], ServedLine | HeldBack | EncodedEntry | None]
    probe: Callable[[int, int, RowReads], EncodedEntry | None] | None


def _uncached(
    serve: Callable[[RawLine], ServedLine | None],
) -> Callable[[RawLine], ServedLine | HeldBack | None]:
    def take(raw: RawLine) -> ServedLine | HeldBack | None:
        served = serve(raw)
        return None if served is None else _light(served)

    return take


def _light(served: ServedLine) -> ServedLine | HeldBack:
    """The entry itself if small; else only its place (a served unterminated tail stays)."""
    if len(served.stripped.json) <= _HOLD_BACK_BYTES or served.stripped.oversize:
        return served
    return HeldBack(served.offset, served.line_size)


def _server(params: WindowParams, max_line_size: int) -> Callable[[RawLine], ServedLine | None]:
    def serve(raw: RawLine) -> ServedLine | None:
        return serve_line(raw, params.mode, params.inline_limit, max_line_size)

    return serve


def open_transcript(root: TranscriptSource, transcript: TranscriptFile) -> ByteSource:
    """Open a resolved transcript (jailed, through TranscriptSource) as a byte source."""
    return root.open(transcript)
