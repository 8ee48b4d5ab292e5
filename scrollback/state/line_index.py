"""The persisted line index of transcripts: its rows and the Protocol of its stores.

One `IndexedFile` row per transcript (keyed by its path under the transcripts
root) says which version of the file the rows describe (device, inode, the
hash of its first bytes, the hash of the bytes just before `covered`) and how
far it reaches: every complete line before `covered` has one `IndexedLine`
row, and no newline lies in [covered, scanned) (the unterminated tail seen so
far). A new version of a file gets a new `generation`: its rows replace the
old ones in the same transaction.

`append` is a compare-and-set on (generation, covered, scanned): two builders
of the same file (threads, processes, replicas) never write the same rows
twice; the one that loses re-reads the state and carries on from there.
Backends: SQLite (scrollback.state.line_index_sqlite, the default) and
PostgreSQL (scrollback.state.line_index_postgres). Both raise StoreBusyError
when the database cannot answer; callers then fall back to reading the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from scrollback.linefile import FileVersion

# (comparison with the offset asked, order) of `lines_before` and `lines_from`: the one
# difference between their queries (`RowQueries._lines`).
LINES_BEFORE = ("<", "DESC")
LINES_FROM = (">=", "ASC")


class RowQueries:
    """`lines_before` and `lines_from` of a store, as one query (`_lines`) each backend writes."""

    def _lines(
        self, key: str, generation: int, offset: int, limit: int, where: tuple[str, str]
    ) -> list[tuple[int, int]]:
        """(offset, length) rows whose offset compares to `offset` as `where` says, in its order."""
        raise NotImplementedError

    def lines_before(
        self, key: str, generation: int, offset: int, limit: int
    ) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting before `offset`, newest first."""
        return self._lines(key, generation, offset, limit, LINES_BEFORE)

    def lines_from(
        self, key: str, generation: int, offset: int, limit: int
    ) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting at or after `offset`, in file order."""
        return self._lines(key, generation, offset, limit, LINES_FROM)


@dataclass(frozen=True, slots=True)
class IndexedFile:
    """How far the index of one file version reaches."""

    generation: int
    version: FileVersion
    covered: int
    scanned: int
    # The hash of the bytes [covered - mark_len, covered): checked before every use.
    mark_len: int
    mark_hash: str


@dataclass(frozen=True, slots=True)
class IndexedLine:
    """One complete line: where it is, its top-level uuid (if found) and its image candidates."""

    offset: int
    length: int
    uuid: str | None
    images: int


class LineIndexStore(Protocol):
    """Where line indexes persist (SQLite or PostgreSQL)."""

    def state(self, key: str) -> IndexedFile | None:
        """The index state of a file, or None if it was never indexed."""
        ...

    def reset(self, key: str, version: FileVersion) -> IndexedFile:
        """Discard the file's rows and start an empty index of this version (a new generation)."""
        ...

    def append(
        self, key: str, expected: IndexedFile, lines: Sequence[IndexedLine], reached: IndexedFile
    ) -> bool:
        """Add rows and move the state from `expected` to `reached`, if nobody moved it first."""
        ...

    def lines_for(self, key: str, generation: int, uuids: Sequence[str]) -> list[IndexedLine]:
        """The indexed lines whose uuid is one of these."""
        ...

    def image_lines(self, key: str, generation: int, start: int, end: int) -> list[IndexedLine]:
        """The indexed lines starting in [start, end) that may hold images, in file order."""
        ...

    def line_start_before(self, key: str, generation: int, offset: int) -> int | None:
        """The start of the last indexed line starting at or before `offset`; None if none."""
        ...

    def lines_before(
        self, key: str, generation: int, offset: int, limit: int
    ) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting before `offset`, newest first."""
        ...

    def lines_from(
        self, key: str, generation: int, offset: int, limit: int
    ) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting at or after `offset`, in file order."""
        ...

    def line_count(self, key: str, generation: int) -> int:
        """How many lines are indexed."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...
