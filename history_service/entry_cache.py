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

Bounded by `SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES` (`HistoryConfig.entry_cache_bytes`,
default 16 MiB; 0 turns it off): the encoded bytes plus a fixed overhead per
entry. Entries held back from a window (larger than its hold-back size) are
never cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from history_service.config import DEFAULT_ENTRY_CACHE_BYTES
from history_service.lines import ServedLine, json_parts
from scrollback.contract.refs import entry_name, is_session_id
from scrollback.history.v1 import history_pb2 as pb
from scrollback.linefile import FileVersion
from scrollback.linefile import mark_of as mark_of
from scrollback.ref.v1 import ref_pb2
from scrollback.server.serialized import length_delimited
from scrollback.transcripts import Stamp

# What an entry costs the budget beyond its encoded bytes (key, record, dict slot).
ENTRY_OVERHEAD = 256

# (file version, session id, media mode, inline limit): one file version as one request serves it.
Scope = tuple[FileVersion, str, int, int]
# The mark of a line read from the file when asked (None: not a whole line there).
Mark = Callable[[], int | None]


@dataclass(frozen=True, slots=True)
class EncodedEntry:
    """A window entry as a serialized `Entry` message (no sub-agent links).

    Kept as it goes into an `EntryBatch` (field 1: its tag and length, then
    the Entry's bytes), so a batch is these items joined, nothing rebuilt.
    """

    offset: int
    line_size: int
    json_size: int
    item: bytes
    # Where the Entry's own bytes start in `item` (after the tag and length).
    head: int

    @property
    def data(self) -> bytes:
        """The serialized Entry alone (a copy)."""
        return self.item[self.head :]


_BATCH_ENTRIES = pb.EntryBatch.DESCRIPTOR.fields_by_name["entries"].number


def links_in(json: bytes, links: Mapping[str, str]) -> list[pb.SubagentLink]:
    """The known sub-agent links whose tool_use id this entry names (as a JSON string)."""
    return [
        pb.SubagentLink(tool_use_id=tool_use_id, session_id=agent)
        for tool_use_id, agent in sorted(links.items())
        if b'"' + tool_use_id.encode() + b'"' in json
    ]


def entry_messages(
    session_id: str, served: ServedLine, links: Mapping[str, str] | None = None
) -> Iterator[pb.Entry | pb.EntryJsonChunk]:
    """An Entry, then EntryJsonChunks when its json does not fit in one message."""
    line = served.stripped
    refs = []
    if line.images and is_session_id(session_id):
        # A line without a usable uuid (every rollout line) is named by its offset.
        name = entry_name(line.uuid, served.offset)
        refs = [
            ref_pb2.MediaRef(
                session_id=session_id,
                entry_uuid=name,
                index=image.index,
                pin=image.pin,
                declared_media_type=image.declared_media_type,
                approx_size_bytes=image.approx_size_bytes,
                uri=f"{session_id}/{name}/{image.index}",
                line_offset_hint=served.offset,
            )
            for image in line.images
        ]
    parts = json_parts(line.json)
    yield pb.Entry(
        uuid=line.uuid,
        type=line.type,
        timestamp=line.timestamp,
        byte_offset=served.offset,
        json=parts[0],
        media_refs=refs,
        failed_image_indexes=list(line.failed_image_indexes),
        json_size_bytes=len(line.json),
        line_size_bytes=served.line_size,
        oversize=line.oversize,
        payloads_deferred=served.payloads_deferred,
        subagent_links=links_in(line.json, links) if links else [],
    )
    for part in parts[1:]:
        yield pb.EntryJsonChunk(byte_offset=served.offset, json_part=part)


def encode(session_id: str, served: ServedLine) -> EncodedEntry:
    """The entry's one `Entry` message, serialized (its json must fit one message)."""
    data = next(entry_messages(session_id, served)).SerializeToString()
    item = length_delimited(_BATCH_ENTRIES, data)
    return EncodedEntry(
        served.offset, served.line_size, len(served.stripped.json), item, len(item) - len(data)
    )


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

    @property
    def bytes_held(self) -> int:
        """What the cached entries cost the budget now."""
        return self._bytes
