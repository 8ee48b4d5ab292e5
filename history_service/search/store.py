"""The search index behind a Protocol: Tantivy embedded, PostgreSQL full-text scaled.

The index keeps, per transcript file, its identity and how far it was indexed
(`FileState`), and per entry its place in the file, its filters and its text
(`EntryRow`). An entry's `key` orders it newest first: the entry's time in
milliseconds in the high bits and a hash of its place in the low bits, so a
newest-first page continues below the last key served. A most-relevant-first
page continues after the number of hits already looked at, among the entries
indexed when the search's first page was answered (`Page.watermark`), so new
entries do not shift a search's later pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any, Protocol

import xxhash

from history_service.search.query import Filters, Query

_LOW_BITS = 20
_MAX_MS = (1 << 42) - 1


@dataclass(frozen=True, slots=True)
class FileState:
    """One indexed transcript file: its identity ("dev:ino:head_len:head_hash") and progress."""

    file_id: int
    path_key: str
    project_dir: str
    session_id: str
    identity: str
    indexed_to: int


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One entry to index."""

    offset: int
    line_end: int  # where the next line starts
    uuid: str
    type: str
    role: str
    timestamp: str
    ts_ms: int | None
    has_photos: bool
    text: str
    # The part of `text` people wrote to start or name the work (a user's prompt,
    # a title or summary): it counts more in relevance than tool output.
    prompt: str = ""


class Order(IntEnum):
    """The order of a search's hits (the values of the proto's SearchOrder)."""

    RELEVANCE = 1
    NEWEST = 2


@dataclass(frozen=True, slots=True)
class Page:
    """Where a search's page starts.

    `watermark`: only entries indexed at or before this time (microseconds since
    the epoch) are served; None: every entry. `before_key` (newest first): only
    keys below it. `offset` (most relevant first): the hits already looked at.
    """

    order: Order
    watermark: int | None = None
    before_key: int | None = None
    offset: int = 0

    def after(self, hit: IndexHit) -> Page:
        """The page that continues after `hit`."""
        if self.order == Order.NEWEST:
            return Page(self.order, self.watermark, hit.key, self.offset + 1)
        return Page(self.order, self.watermark, self.before_key, self.offset + 1)


@dataclass(frozen=True, slots=True)
class IndexHit:
    """One matching entry as the index holds it."""

    key: int
    file_id: int
    identity: str
    project_dir: str
    session_id: str
    offset: int
    line_end: int
    uuid: str
    type: str
    role: str
    timestamp: str
    has_photos: bool
    text: str


def hit_of(row: Sequence[Any]) -> IndexHit:
    """An IndexHit from a row of the backends' common SELECT list."""
    return IndexHit(
        key=int(row[0]),
        file_id=int(row[1]),
        identity=str(row[2]),
        project_dir=str(row[3]),
        session_id=str(row[4]),
        offset=int(row[5]),
        line_end=int(row[6]),
        uuid=str(row[7]),
        type=str(row[8]),
        role=str(row[9]),
        timestamp=str(row[10]),
        has_photos=bool(row[11]),
        text=str(row[12]),
    )


def project_scope(filters: Filters, projects: frozenset[str] | None) -> frozenset[str] | None:
    """The projects a search may read: the caller's (None: all), narrowed by the filter."""
    if not filters.project_dir:
        return projects
    if projects is not None and filters.project_dir not in projects:
        return frozenset()
    return frozenset({filters.project_dir})


def timestamp_ms(timestamp: str) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 timestamp, None if it is not one."""
    if not timestamp:
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return min(max(int(moment.timestamp() * 1000), 0), _MAX_MS)


def entry_key(path_key: str, offset: int, ts_ms: int | None) -> int:
    """The ordering key of an entry (see the module docstring)."""
    low = xxhash.xxh3_64_intdigest(f"{path_key}\0{offset}".encode()) & ((1 << _LOW_BITS) - 1)
    return ((ts_ms or 0) << _LOW_BITS) | low


class SearchIndex(Protocol):
    """What the indexer and the searcher need from a backend."""

    def files(self) -> dict[str, FileState]:
        """Every indexed file, by path key."""
        ...

    def reset_file(self, path_key: str, project_dir: str, session_id: str, identity: str) -> int:
        """Start (or restart) a file from offset 0, dropping its entries; returns its file id."""
        ...

    def add_entries(
        self, file_id: int, rows: Sequence[EntryRow], start: int, indexed_to: int
    ) -> bool:
        """Add entries of a file read from `start`, and move its progress to `indexed_to`.

        One transaction. False (nothing written) when the file's progress is no
        longer `start`: another indexer (a replica) got there first. LookupError
        when the file was reset or dropped meanwhile.
        """
        ...

    def drop_file(self, path_key: str) -> None:
        """Forget a file and its entries (it is gone from the root)."""
        ...

    def flush(self) -> None:
        """Make what was added searchable now (the end of an indexing pass)."""
        ...

    def search(
        self,
        query: Query,
        filters: Filters,
        projects: frozenset[str] | None,
        page: Page,
        limit: int,
    ) -> list[IndexHit]:
        """Up to `limit` hits in the page's order from where it starts, in `projects`
        (None: all)."""
        ...

    def complete(self) -> bool:
        """False while the index is being built for the first time (a search is partial)."""
        ...

    def mark_complete(self) -> None:
        """Record that a pass indexed every transcript of the root."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...
