"""The search index behind a Protocol: SQLite FTS5 embedded, PostgreSQL full-text scaled.

The index keeps, per transcript file, its identity and how far it was indexed
(`FileState`), and per entry its place in the file, its filters and its text
(`EntryRow`). An entry's `key` orders the index newest first: the entry's
time in milliseconds in the high bits and a hash of its place in the low bits
(moved up by one on the rare clash), so "newest first" is the index's own
order and a page continues below the last key served.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
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

    def search(
        self,
        query: Query,
        filters: Filters,
        projects: frozenset[str] | None,
        before_key: int | None,
        limit: int,
    ) -> list[IndexHit]:
        """Up to `limit` hits newest first, below `before_key`, in `projects` (None: all)."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...
