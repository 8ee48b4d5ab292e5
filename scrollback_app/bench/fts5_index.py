"""The embedded search index of earlier versions, kept as the bench's baseline: SQLite FTS5.

It lived in its own file, `<state>/search.sqlite` (the history service now
deletes that file at start and indexes into Tantivy instead); `scrollback
bench` builds it and searches it in-process beside the new index, so the
figures compare both engines in one run. Newest first only: it has no
relevance.

A file of its own keeps the state database's write lock free while a large
transcript is indexed. WAL mode: searches (one connection per thread) read
while the indexer writes. The FTS5 table's rowid is the entry's ordering key
(see history_service.search.store), so a query walks the hits newest first
and stops at the page size instead of sorting every match.

Two contentless FTS5 tables hold each entry's terms (history_service.search.terms;
the `ascii` tokenizer splits them only at the spaces between them):
`search_text` its project-tagged ones, so a MATCH reads only the visible
projects' lists, and `search_all` its ALL_TAG ones, for callers who see every
project (one table each: cheaper to build than both in one). The text itself
is in `search_entry.body`; a contentless row is deleted by giving FTS5 its
terms again, recomputed from the body. The schema's version is the
file's `user_version`: a file of another version is the index of other code,
dropped and rebuilt (the indexer reads the transcripts again).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from history_service.search.postgres import sql_filters
from history_service.search.query import Filters, Query
from history_service.search.store import (
    EntryRow,
    FileState,
    IndexHit,
    Page,
    entry_key,
    hit_of,
    project_scope,
)
from history_service.search.terms import ALL_TAG, index_words, joined, project_tag, scope_tags
from scrollback.state.sqlite import use_wal, write_transaction

FILE_NAME = "search.sqlite"
SCHEMA_VERSION = 2
_DROP_BATCH = 500
FTS_HASH_BYTES = 64 * 1024 * 1024
_TABLES = ("search_text", "search_all", "search_entry", "search_file")
_SCHEMA = (
    """CREATE TABLE search_file (
    file_id INTEGER PRIMARY KEY,
    path_key TEXT NOT NULL UNIQUE,
    project_dir TEXT NOT NULL,
    session_id TEXT NOT NULL,
    identity TEXT NOT NULL,
    indexed_to INTEGER NOT NULL
)""",
    """CREATE TABLE search_entry (
    key INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    project_dir TEXT NOT NULL,
    session_id TEXT NOT NULL,
    uuid TEXT NOT NULL,
    type TEXT NOT NULL,
    role TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    ts_ms INTEGER,
    has_photos INTEGER NOT NULL,
    body TEXT NOT NULL
)""",
    "CREATE INDEX search_entry_file ON search_entry (file_id)",
    "CREATE INDEX search_entry_session ON search_entry (session_id, key)",
    "CREATE VIRTUAL TABLE search_text USING fts5 (terms, content = '', tokenize = 'ascii')",
    "CREATE VIRTUAL TABLE search_all USING fts5 (terms, content = '', tokenize = 'ascii')",
)


def fts_rows(project_dir: str, texts: Iterable[tuple[int, str]]) -> tuple[list[Any], list[Any]]:
    """The (rowid, terms) rows of search_text and of search_all for some entries' texts."""
    tag = project_tag(project_dir)
    own: list[tuple[int, str]] = []
    every: list[tuple[int, str]] = []
    for key, text in texts:
        words = index_words(text)
        own.append((key, joined(tag, words)))
        every.append((key, joined(ALL_TAG, words)))
    return own, every


class SqliteSearchIndex:
    """SearchIndex over SQLite FTS5."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self._path = state_dir / FILE_NAME
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        write_transaction(self._connection(), self._create)

    @staticmethod
    def _create(connection: sqlite3.Connection) -> None:
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            for table in _TABLES:
                connection.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        for table in ("search_text", "search_all"):
            # FTS5 keeps a transaction's terms in memory up to `hashsize` and writes
            # them as one segment: the indexer's large batches become a segment each
            # instead of many small ones merged again and again.
            connection.execute(
                f"INSERT INTO {table} ({table}, rank) VALUES ('hashsize', ?)", (FTS_HASH_BYTES,)
            )

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=30
            )
            use_wal(connection, 30)
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
            with self._lock:
                self._all.append(connection)
        return connection

    def files(self) -> dict[str, FileState]:
        rows = self._connection().execute(
            "SELECT file_id, path_key, project_dir, session_id, identity, indexed_to"
            " FROM search_file"
        )
        return {row[1]: FileState(*row) for row in rows}

    def reset_file(self, path_key: str, project_dir: str, session_id: str, identity: str) -> int:
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            self._drop(connection, path_key)
            cursor = connection.execute(
                "INSERT INTO search_file (path_key, project_dir, session_id, identity, indexed_to)"
                " VALUES (?, ?, ?, ?, 0)",
                (path_key, project_dir, session_id, identity),
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    @staticmethod
    def _drop(connection: sqlite3.Connection, path_key: str) -> None:
        row = connection.execute(
            "SELECT file_id, project_dir FROM search_file WHERE path_key = ?", (path_key,)
        ).fetchone()
        if row is None:
            return
        entries = connection.execute(
            "SELECT key, body FROM search_entry WHERE file_id = ?", (row[0],)
        )
        # A contentless row goes by giving FTS5 the terms it was given; in batches, so
        # memory stays bounded whatever the file weighs.
        while batch := entries.fetchmany(_DROP_BATCH):
            own, every = fts_rows(row[1], batch)
            connection.executemany(
                "INSERT INTO search_text (search_text, rowid, terms) VALUES ('delete', ?, ?)", own
            )
            connection.executemany(
                "INSERT INTO search_all (search_all, rowid, terms) VALUES ('delete', ?, ?)", every
            )
        connection.execute("DELETE FROM search_entry WHERE file_id = ?", (row[0],))
        connection.execute("DELETE FROM search_file WHERE file_id = ?", (row[0],))

    def add_entries(
        self, file_id: int, rows: Sequence[EntryRow], start: int, indexed_to: int
    ) -> bool:
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            file = connection.execute(
                "SELECT path_key, project_dir, session_id, indexed_to FROM search_file"
                " WHERE file_id = ?",
                (file_id,),
            ).fetchone()
            if file is None:
                raise LookupError("file is not indexed")
            path_key, project_dir, session_id, progress = file
            if progress != start:
                connection.execute("ROLLBACK")
                return False
            keyed = [(entry_key(path_key, row.offset, row.ts_ms), row) for row in rows]
            connection.execute("SAVEPOINT batch")
            try:
                # The common case: no two keys clash, one statement per table.
                self._insert(connection, file_id, project_dir, session_id, keyed)
                connection.execute("RELEASE batch")
            except sqlite3.IntegrityError:
                connection.execute("ROLLBACK TO batch")
                connection.execute("RELEASE batch")
                for key, row in keyed:
                    while True:
                        try:
                            self._insert(connection, file_id, project_dir, session_id, [(key, row)])
                            break
                        except sqlite3.IntegrityError:
                            key += 1  # two entries hashed to one key: take the next
            connection.execute(
                "UPDATE search_file SET indexed_to = ? WHERE file_id = ?", (indexed_to, file_id)
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        return True

    @staticmethod
    def _insert(
        connection: sqlite3.Connection,
        file_id: int,
        project_dir: str,
        session_id: str,
        keyed: Sequence[tuple[int, EntryRow]],
    ) -> None:
        connection.executemany(
            "INSERT INTO search_entry VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    key,
                    file_id,
                    row.offset,
                    row.line_end,
                    project_dir,
                    session_id,
                    row.uuid,
                    row.type,
                    row.role,
                    row.timestamp,
                    row.ts_ms,
                    int(row.has_photos),
                    row.text,
                )
                for key, row in keyed
            ],
        )
        own, every = fts_rows(project_dir, [(key, row.text) for key, row in keyed])
        connection.executemany("INSERT INTO search_text (rowid, terms) VALUES (?, ?)", own)
        connection.executemany("INSERT INTO search_all (rowid, terms) VALUES (?, ?)", every)

    def drop_file(self, path_key: str) -> None:
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            self._drop(connection, path_key)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    def search(
        self,
        query: Query,
        filters: Filters,
        projects: frozenset[str] | None,
        page: Page,
        limit: int,
    ) -> list[IndexHit]:
        before_key = page.before_key
        scope = project_scope(filters, projects)
        if scope is not None and not scope:
            return []
        # Only the visible projects' terms are asked for: the match never reads others'.
        # Who sees every project asks the one list per word of search_all.
        table = "search_all" if scope is None else "search_text"
        where = [f"{table} MATCH ?"]
        args: list[Any] = [query.fts5(scope_tags(scope))]
        if before_key is not None:
            where.append("e.key < ?")
            args.append(before_key)
        if projects is not None:
            where.append(f"e.project_dir IN ({','.join('?' * len(projects))})")
            args.extend(sorted(projects))
        sql_filters(filters, where, args)
        columns = (
            "SELECT e.key, e.file_id, f.identity, e.project_dir, e.session_id, e.line_start,"
            " e.line_end, e.uuid, e.type, e.role, e.timestamp, e.has_photos, e.body"
        )
        if filters.session_id:
            # One session: walk its entries newest first and test each against the
            # query (a rowid lookup in FTS5), instead of walking every session's hits.
            source = (
                " FROM search_entry e INDEXED BY search_entry_session"
                f" CROSS JOIN {table} ON {table}.rowid = e.key"
            )
            order = "e.key"
        else:
            source = f" FROM {table} CROSS JOIN search_entry e ON e.key = {table}.rowid"
            order = f"{table}.rowid"
        sql = (
            columns
            + source
            + " CROSS JOIN search_file f ON f.file_id = e.file_id"
            + f" WHERE {' AND '.join(where)} ORDER BY {order} DESC LIMIT ?"
        )
        args.append(limit)
        rows = self._connection().execute(sql, args).fetchall()
        return [hit_of(row) for row in rows]

    def flush(self) -> None:
        """Each batch is its own transaction: nothing waits."""

    def complete(self) -> bool:
        return True

    def mark_complete(self) -> None:
        """Nothing to record."""

    def close(self) -> None:
        with self._lock:
            for connection in self._all:
                connection.close()
            self._all.clear()
