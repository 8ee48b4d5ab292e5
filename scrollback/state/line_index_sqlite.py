"""The line index in the embedded SQLite state database (migration 4).

One connection per store, shared by the threads of the process under a lock;
writers of several processes serialize on `BEGIN IMMEDIATE`, and `append`
checks the state it expects inside that transaction.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scrollback.linefile import FileVersion
from scrollback.state.line_index import (
    IndexedFile,
    IndexedLine,
    RowQueries,
)
from scrollback.state.sqlite import busy_as_unavailable, connect, write_transaction

_STATE = (
    "SELECT generation, dev, ino, head_len, head_hash, covered, scanned, mark_len, mark_hash"
    " FROM line_index_file WHERE file_key = ?"
)
# SQLite's default limit on bound parameters is 32766; stay well under it.
_BATCH = 500


def state_of(row: tuple[Any, ...] | None) -> IndexedFile | None:
    """The state a `line_index_file` row holds (columns as in `_STATE`); shared with PostgreSQL."""
    if row is None:
        return None
    g, dev, ino, head_len, head_hash, covered, scanned, mark_len, mark_hash = row
    return IndexedFile(
        int(g),
        FileVersion(int(dev), int(ino), int(head_len), int(str(head_hash), 16)),
        int(covered),
        int(scanned),
        int(mark_len),
        str(mark_hash),
    )


class SqliteLineIndexStore(RowQueries):
    """LineIndexStore over the state database in a state dir."""

    def __init__(self, state_dir: Path) -> None:
        self._connection = connect(state_dir)
        # The index is derived data, checked before each use: a commit lost to a
        # power cut is rebuilt, so its commits need not wait for the disk (WAL
        # stays consistent with NORMAL).
        self._connection.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()

    def state(self, key: str) -> IndexedFile | None:
        """The index state of a file, or None if it was never indexed."""
        with self._lock, busy_as_unavailable():
            return state_of(self._connection.execute(_STATE, (key,)).fetchone())

    def reset(self, key: str, version: FileVersion) -> IndexedFile:
        """Discard the file's rows and start an empty index of this version."""

        def work(connection: sqlite3.Connection) -> IndexedFile:
            row = connection.execute(
                "SELECT file_id, generation FROM line_index_file WHERE file_key = ?", (key,)
            ).fetchone()
            if row is None:
                generation = 1
                connection.execute(
                    "INSERT INTO line_index_file (file_key, generation, dev, ino, head_len,"
                    " head_hash, covered, scanned, mark_len, mark_hash, updated_at)"
                    " VALUES (?, 1, ?, ?, ?, ?, 0, 0, 0, '', ?)",
                    (
                        key,
                        version.dev,
                        version.ino,
                        version.head_len,
                        version.hex_hash,
                        time.time(),
                    ),
                )
            else:
                generation = int(row[1]) + 1
                connection.execute("DELETE FROM line_index_line WHERE file_id = ?", (row[0],))
                connection.execute(
                    "UPDATE line_index_file SET generation = ?, dev = ?, ino = ?, head_len = ?,"
                    " head_hash = ?, covered = 0, scanned = 0, mark_len = 0, mark_hash = '',"
                    " updated_at = ? WHERE file_id = ?",
                    (
                        generation,
                        version.dev,
                        version.ino,
                        version.head_len,
                        version.hex_hash,
                        time.time(),
                        row[0],
                    ),
                )
            return IndexedFile(generation, version, 0, 0, 0, "")

        with self._lock:
            return write_transaction(self._connection, work)

    def append(
        self, key: str, expected: IndexedFile, lines: Sequence[IndexedLine], reached: IndexedFile
    ) -> bool:
        """Add rows and move the state from `expected` to `reached`, if nobody moved it first."""

        def work(connection: sqlite3.Connection) -> bool:
            row = connection.execute(
                "SELECT file_id, generation, covered, scanned FROM line_index_file"
                " WHERE file_key = ?",
                (key,),
            ).fetchone()
            if row is None or (int(row[1]), int(row[2]), int(row[3])) != (
                expected.generation,
                expected.covered,
                expected.scanned,
            ):
                return False
            file_id = row[0]
            connection.executemany(
                "INSERT OR IGNORE INTO line_index_line (file_id, line_offset, length, uuid, images)"
                " VALUES (?, ?, ?, ?, ?)",
                [(file_id, line.offset, line.length, line.uuid, line.images) for line in lines],
            )
            connection.execute(
                "UPDATE line_index_file SET covered = ?, scanned = ?, mark_len = ?,"
                " mark_hash = ?, updated_at = ? WHERE file_id = ?",
                (
                    reached.covered,
                    reached.scanned,
                    reached.mark_len,
                    reached.mark_hash,
                    time.time(),
                    file_id,
                ),
            )
            return True

        with self._lock:
            return write_transaction(self._connection, work)

    def _file_id(self, key: str, generation: int) -> int | None:
        row = self._connection.execute(
            "SELECT file_id FROM line_index_file WHERE file_key = ? AND generation = ?",
            (key, generation),
        ).fetchone()
        return None if row is None else int(row[0])

    def lines_for(self, key: str, generation: int, uuids: Sequence[str]) -> list[IndexedLine]:
        """The indexed lines whose uuid is one of these."""
        found: list[IndexedLine] = []
        with self._lock, busy_as_unavailable():
            file_id = self._file_id(key, generation)
            if file_id is None:
                return found
            wanted = list(dict.fromkeys(uuids))
            for at in range(0, len(wanted), _BATCH):
                batch = wanted[at : at + _BATCH]
                rows = self._connection.execute(
                    "SELECT line_offset, length, uuid, images FROM line_index_line"
                    f" WHERE file_id = ? AND uuid IN ({','.join('?' * len(batch))})"
                    " ORDER BY line_offset",
                    (file_id, *batch),
                ).fetchall()
                found.extend(IndexedLine(int(r[0]), int(r[1]), r[2], int(r[3])) for r in rows)
        return found

    def image_lines(self, key: str, generation: int, start: int, end: int) -> list[IndexedLine]:
        """The indexed lines starting in [start, end) that may hold images, in file order."""
        with self._lock, busy_as_unavailable():
            file_id = self._file_id(key, generation)
            if file_id is None:
                return []
            rows = self._connection.execute(
                "SELECT line_offset, length, uuid, images FROM line_index_line WHERE file_id = ?"
                " AND line_offset >= ? AND line_offset < ? AND images > 0 ORDER BY line_offset",
                (file_id, start, end),
            ).fetchall()
        return [IndexedLine(int(r[0]), int(r[1]), r[2], int(r[3])) for r in rows]

    def line_start_before(self, key: str, generation: int, offset: int) -> int | None:
        """The start of the last indexed line starting at or before `offset`; None if none."""
        with self._lock, busy_as_unavailable():
            file_id = self._file_id(key, generation)
            if file_id is None:
                return None
            row = self._connection.execute(
                "SELECT MAX(line_offset) FROM line_index_line WHERE file_id = ? AND line_offset <= ?",
                (file_id, offset),
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _lines(
        self, key: str, generation: int, offset: int, limit: int, where: tuple[str, str]
    ) -> list[tuple[int, int]]:
        comparison, order = where
        with self._lock, busy_as_unavailable():
            file_id = self._file_id(key, generation)
            if file_id is None:
                return []
            rows: list[tuple[int, int]] = self._connection.execute(
                "SELECT line_offset, length FROM line_index_line WHERE file_id = ?"
                f" AND line_offset {comparison} ? ORDER BY line_offset {order} LIMIT ?",
                (file_id, offset, limit),
            ).fetchall()
        return rows  # (INTEGER, INTEGER) rows come back as tuples of ints

    def line_count(self, key: str, generation: int) -> int:
        """How many lines are indexed."""
        with self._lock, busy_as_unavailable():
            file_id = self._file_id(key, generation)
            if file_id is None:
                return 0
            row = self._connection.execute(
                "SELECT COUNT(*) FROM line_index_line WHERE file_id = ?", (file_id,)
            ).fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._connection.close()
