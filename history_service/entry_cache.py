"""Window entries already stripped and encoded, kept per worker process (a bounded LRU).

Every latest window of a busy session serves the same lines again: stripping
them and building their `Entry` messages is most of a window's work. The
cache keeps the serialized `Entry` (without sub-agent links, which change as
the session's agents are indexed and are added when sent) of each small entry
served, keyed by the file version (device, inode, head hash), the request's
session id, media mode and inline limit, and the line's offset and length.

A hit is used only if the line's bytes still carry its mark: the xxh3 hash of
the newline before the line, its first and last `MARK_EDGE` bytes, and the
newline after it (the whole line when it is short), computed from the
bytes read for the line (`mark_of`) or, for a line found through the line
index, from the few merged reads of its batch (scrollback.linewalk
`RowReads.mark`) instead of reading the line: one mark, scrollback.linefile's
`line_mark`. An entry whose mark was checked
while the file had settled keeps the file's stamp (scrollback.transcripts
`stamp_of`), and while the file's stamp stays the same its hits skip the
check. A growing file's stamp changes at every append, so its hits are
checked. A line that was stripped without being read whole (longer than
the max line size) is never cached, nor an unterminated tail. Limitation,
the same as page tokens': a same-size rewrite in the middle of a long line
that keeps the file's first bytes and the line's edges is not seen (the line
index's own checks and the file identity catch every other rewrite,
truncation or replacement).

The cache wraps a window's own line server from outside (`EntryCache.wrap`,
which history_service.core hands the window reader): `CachedServer` answers
from the cache, else asks the window's server and keeps what it serves,
encoded by history_service.window_wire.

Bounded by `SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES` (`HistoryConfig.entry_cache_bytes`,
default 16 MiB; 0 turns it off): the encoded bytes plus a fixed overhead per
entry. Entries held back from a window (larger than its hold-back size) are
never cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from history_service.config import DEFAULT_ENTRY_CACHE_BYTES
from history_service.lines import RawLine, RowReads, ServedLine
from history_service.window_wire import EncodedEntry, encode
from history_service.windows import LineServer, Serving, WindowEntry
from scrollback.linefile import FileVersion, mark_of
from scrollback.transcripts import Stamp

# What an entry costs the budget beyond its encoded bytes (key, record, dict slot).
ENTRY_OVERHEAD = 256

# (file version, session id, media mode, inline limit): one file version as one request serves it.
Scope = tuple[FileVersion, str, int, int]
# The mark of a line read from the file when asked (None: not a whole line there).
Mark = Callable[[], int | None]


class CachedServer:
    """A window's LineServer wrapped by the cache: a line's cached entry if it is still
    current, else the wrapped server's entry, kept (encoded) when it is a small whole line.

    `EntryCache.wrap` makes one per window (history_service.windows `ServerWrap`).
    """

    def __init__(self, cache: EntryCache, inner: LineServer, serving: Serving) -> None:
        self._cache = cache
        self._inner = inner
        self._session_id = serving.session_id
        self._scope: Scope = (
            serving.version,
            serving.session_id,
            int(serving.mode),
            serving.inline_limit,
        )
        self._stamp = serving.stamp

    @property
    def probe(self) -> Callable[[int, int, RowReads], EncodedEntry | None]:
        """Answers for an indexed line from the cache, its mark read from the batch's reads."""
        return self._probe

    def _probe(self, offset: int, length: int, reads: RowReads) -> EncodedEntry | None:
        return self._cache.lookup(
            self._scope, offset, length, self._stamp, lambda: reads.mark(offset, length)
        )

    def serve(self, raw: RawLine) -> WindowEntry | None:
        """The line's entry: cached, or served by the wrapped server (and cached if small and whole).

        A line not read whole (longer than the max line size) or unterminated
        is never looked up nor kept; an entry the wrapped server held back or
        served as an oversize stub is not kept either.
        """
        whole = raw.terminated and raw.data is not None
        mark = 0
        if whole:
            assert raw.data is not None
            mark = mark_of(raw.start, raw.data)
            found = self._cache.lookup(self._scope, raw.start, raw.size, self._stamp, lambda: mark)
            if found is not None:
                return found
        entry = self._inner.serve(raw)
        if whole and isinstance(entry, ServedLine) and not entry.stripped.oversize:
            encoded = encode(self._session_id, entry)
            self._cache.put(self._scope, mark, encoded, self._stamp)
            return encoded
        return entry


class EntryCache:
    """An LRU of encoded entries under a byte budget (thread-safe)."""

    def __init__(self, max_bytes: int = DEFAULT_ENTRY_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[
            tuple[Scope, int, int], tuple[int, EncodedEntry, Stamp | None]
        ] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # Hits and stores (for tests and benchmarks).
        self.hits = 0
        self.stores = 0

    @property
    def enabled(self) -> bool:
        """False when the budget is 0."""
        return self.max_bytes > 0

    def get(
        self, scope: Scope, offset: int, length: int
    ) -> tuple[int, EncodedEntry, Stamp | None] | None:
        """(mark, entry, stamp) cached for this line, not yet checked against the file.

        Without the lock: each OrderedDict call is one atomic step under the
        GIL (the keys hash and compare in C), and a key dropped between the
        two only loses its recency.
        """
        key = (scope, offset, length)
        found = self._entries.get(key)
        if found is not None:
            try:  # noqa: SIM105 - contextlib.suppress costs more, once per entry served
                self._entries.move_to_end(key)
            except KeyError:
                pass
        return found

    def lookup(
        self, scope: Scope, offset: int, length: int, stamp: Stamp | None, mark: Mark
    ) -> EncodedEntry | None:
        """The cached entry of this line if it is still current, else None.

        Current: stamped under the file's present `stamp` (not None), or else
        its mark equals `mark()`, the line's mark read now (None: not a
        whole line). A checked hit under a stamp is stamped, so the next
        ones skip the check.
        """
        found = self.get(scope, offset, length)
        if found is None:
            return None
        if stamp is None or found[2] != stamp:
            if mark() != found[0]:
                return None
            if stamp is not None:
                key = (scope, offset, length)
                with self._lock:  # only if still held: the budget counts what is held
                    if self._entries.get(key) is found:
                        self._entries[key] = (found[0], found[1], stamp)
        self.hits += 1
        return found[1]

    def put(self, scope: Scope, mark: int, entry: EncodedEntry, stamp: Stamp | None = None) -> None:
        """Keep an entry, dropping the least recently used ones over the budget.

        `stamp`: the file's stamp taken before the line was read, if it had settled.
        """
        cost = len(entry.item) + ENTRY_OVERHEAD
        if cost > self.max_bytes // 8:
            return  # one entry never takes more than a slice of the cache
        key = (scope, entry.offset, entry.line_size)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1].item) + ENTRY_OVERHEAD
            self._entries[key] = (mark, entry, stamp)
            self._bytes += cost
            self.stores += 1
            while self._bytes > self.max_bytes:
                _, (_, dropped, _) = self._entries.popitem(last=False)
                self._bytes -= len(dropped.item) + ENTRY_OVERHEAD

    def wrap(self, inner: LineServer, serving: Serving) -> LineServer:
        """`inner` (a window's LineServer) served through this cache."""
        return CachedServer(self, inner, serving)

    @property
    def bytes_held(self) -> int:
        """What the cached entries cost the budget now."""
        return self._bytes
