"""The line index in the PostgreSQL state database (migration 4).

`append` locks the file's row (`SELECT ... FOR UPDATE`) and checks the state
it expects before adding rows, so concurrent builders on several replicas
never write the same rows twice; rows go in with COPY.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg

from scrollback.linefile import FileVersion
from scrollback.state.line_index import (
    IndexedFile,
    IndexedLine,
    RowQueries,
)
from scrollback.state.line_index_sqlite import state_of
from scrollback.state.postgres import Pool, fetch_all, fetch_one, transaction

Connection = psycopg.Connection[tuple[Any, ...]]

_STATE = (
    "SELECT generation, dev, ino, head_len, head_hash, covered, scanned, mark_len, mark_hash"
    " FROM line_index_file WHERE file_key = %s"
)


class PostgresLineIndexStore(RowQueries):
    """LineIndexStore over a PostgreSQL pool (the caller's pool; closed with the store)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def state(self, key: str) -> IndexedFile | None:
        """The index state of a file, or None if it was never indexed."""
        return state_of(fetch_one(self._pool, _STATE, (key,)))

    def reset(self, key: str, version: FileVersion) -> IndexedFile:
        """Discard the file's rows and start an empty index of this version."""

        def work(connection: Connection) -> IndexedFile:
            connection.execute(
                "INSERT INTO line_index_file (file_key, generation, dev, ino, head_len,"
                " head_hash, covered, scanned, mark_len, mark_hash, updated_at)"
                " VALUES (%s, 0, 0, 0, 0, '', 0, 0, 0, '', %s) ON CONFLICT (file_key) DO NOTHING",
                (key, time.time()),
            )
            row = connection.execute(
                "SELECT file_id, generation FROM line_index_file WHERE file_key = %s FOR UPDATE",
                (key,),
            ).fetchone()
            assert row is not None
            generation = int(row[1]) + 1
            connection.execute("DELETE FROM line_index_line WHERE file_id = %s", (row[0],))
            connection.execute(
                "UPDATE line_index_file SET generation = %s, dev = %s, ino = %s, head_len = %s,"
                " head_hash = %s, covered = 0, scanned = 0, mark_len = 0, mark_hash = '',"
                " updated_at = %s WHERE file_id = %s",
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

        return transaction(self._pool, work)

    def append(
        self, key: str, expected: IndexedFile, lines: Sequence[IndexedLine], reached: IndexedFile
    ) -> bool:
        """Add rows and move the state from `expected` to `reached`, if nobody moved it first."""

        def work(connection: Connection) -> bool:
            row = connection.execute(
                "SELECT file_id, generation, covered, scanned FROM line_index_file"
                " WHERE file_key = %s FOR UPDATE",
                (key,),
            ).fetchone()
            if row is None or (int(row[1]), int(row[2]), int(row[3])) != (
                expected.generation,
                expected.covered,
                expected.scanned,
            ):
                return False
            file_id = int(row[0])
            with (
                connection.cursor() as cursor,
                cursor.copy(
                    "COPY line_index_line (file_id, line_offset, length, uuid, images) FROM STDIN"
                ) as copy,
            ):
                for line in lines:
                    copy.write_row((file_id, line.offset, line.length, line.uuid, line.images))
            connection.execute(
                "UPDATE line_index_file SET covered = %s, scanned = %s, mark_len = %s,"
                " mark_hash = %s, updated_at = %s WHERE file_id = %s",
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

        return transaction(self._pool, work)

    def lines_for(self, key: str, generation: int, uuids: Sequence[str]) -> list[IndexedLine]:
        """The indexed lines whose uuid is one of these."""
        rows = fetch_all(
            self._pool,
            "SELECT l.line_offset, l.length, l.uuid, l.images FROM line_index_line l"
            " JOIN line_index_file f ON f.file_id = l.file_id"
            " WHERE f.file_key = %s AND f.generation = %s AND l.uuid = ANY(%s)"
            " ORDER BY l.line_offset",
            (key, generation, list(dict.fromkeys(uuids))),
        )
        return [IndexedLine(int(r[0]), int(r[1]), r[2], int(r[3])) for r in rows]

    def image_lines(self, key: str, generation: int, start: int, end: int) -> list[IndexedLine]:
        """The indexed lines starting in [start, end) that may hold images, in file order."""
        rows = fetch_all(
            self._pool,
            "SELECT l.line_offset, l.length, l.uuid, l.images FROM line_index_line l"
            " JOIN line_index_file f ON f.file_id = l.file_id"
            " WHERE f.file_key = %s AND f.generation = %s AND l.line_offset >= %s"
            " AND l.line_offset < %s AND l.images > 0 ORDER BY l.line_offset",
            (key, generation, start, end),
        )
        return [IndexedLine(int(r[0]), int(r[1]), r[2], int(r[3])) for r in rows]

    def line_start_before(self, key: str, generation: int, offset: int) -> int | None:
        """The start of the last indexed line starting at or before `offset`; None if none."""
        row = fetch_one(
            self._pool,
            "SELECT MAX(l.line_offset) FROM line_index_line l JOIN line_index_file f"
            " ON f.file_id = l.file_id WHERE f.file_key = %s AND f.generation = %s"
            " AND l.line_offset <= %s",
            (key, generation, offset),
        )
        return None if row is None or row[0] is None else int(row[0])

    def _lines(
        self, key: str, generation: int, offset: int, limit: int, where: tuple[str, str]
    ) -> list[tuple[int, int]]:
        comparison, order = where
        rows = fetch_all(
            self._pool,
            "SELECT l.line_offset, l.length FROM line_index_line l"
            " JOIN line_index_file f ON f.file_id = l.file_id"
            f" WHERE f.file_key = %s AND f.generation = %s AND l.line_offset {comparison} %s"
            f" ORDER BY l.line_offset {order} LIMIT %s",
            (key, generation, offset, limit),
        )
        return [(int(r[0]), int(r[1])) for r in rows]

    def line_count(self, key: str, generation: int) -> int:
        """How many lines are indexed."""
        row = fetch_one(
            self._pool,
            "SELECT COUNT(*) FROM line_index_line l JOIN line_index_file f"
            " ON f.file_id = l.file_id WHERE f.file_key = %s AND f.generation = %s",
            (key, generation),
        )
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()
