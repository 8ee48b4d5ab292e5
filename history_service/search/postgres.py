"""The scaled search index: PostgreSQL full-text search (tsvector, GIN), shared by replicas.

The same tables as the SQLite backend (history_service.search.sqlite), with
the text in `search_entry.body` and beside it a `tsvector` of its
project-tagged terms (history_service.search.terms), written as tsvector
input with their positions, so PostgreSQL's parser never re-cuts them; a
query is tsquery input over the visible projects' terms, so the GIN index
reads only their lists. The tables are created on first use under an
advisory lock, and dropped and created again when `search_schema` holds
another version (the index is derived: the indexer reads the transcripts
again). Replicas may all index: `add_entries` writes only when the file's
progress is where the batch started, so a batch two replicas race on is
written once.

Relevance is `ts_rank_cd` over the visible projects' terms, divided by the
entry's length (a long tool dump does not outrank a short prompt by
repeating a word), with a prompt's terms at weight A and other text at D.
Each entry keeps when it was added (`added_us`), so a search's later pages
serve only what was there at its first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg

from history_service.search.query import Filters, Query
from history_service.search.store import (
    EntryRow,
    FileState,
    IndexHit,
    Order,
    Page,
    entry_key,
    hit_of,
    project_scope,
)
from history_service.search.terms import ALL_TAG, index_words, project_tag, scope_tags, under
from scrollback.state.postgres import Pool, fetch_all, transaction

SCHEMA_LOCK = 0x5C20_0017
SCHEMA_VERSION = 3
# ts_rank_cd's normalization: the rank divided by the document's length.
_RANK_NORMALIZATION = 2
# Positions past this are all this one (PostgreSQL's own limit).
_MAX_POSITION = 16383
_SCHEMA = (
    """CREATE TABLE search_file (
    file_id BIGSERIAL PRIMARY KEY,
    path_key TEXT NOT NULL UNIQUE,
    project_dir TEXT NOT NULL,
    session_id TEXT NOT NULL,
    identity TEXT NOT NULL,
    indexed_to BIGINT NOT NULL
)""",
    """CREATE TABLE search_entry (
    key BIGINT PRIMARY KEY,
    file_id BIGINT NOT NULL REFERENCES search_file (file_id) ON DELETE CASCADE,
    line_start BIGINT NOT NULL,
    line_end BIGINT NOT NULL,
    project_dir TEXT NOT NULL,
    session_id TEXT NOT NULL,
    uuid TEXT NOT NULL,
    type TEXT NOT NULL,
    role TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    ts_ms BIGINT,
    has_photos BOOLEAN NOT NULL,
    body TEXT NOT NULL,
    tsv TSVECTOR NOT NULL,
    added_us BIGINT NOT NULL
)""",
    "CREATE INDEX search_entry_file ON search_entry (file_id)",
    "CREATE INDEX search_entry_session ON search_entry (session_id, key)",
    "CREATE INDEX search_entry_project ON search_entry (project_dir, key)",
    "CREATE INDEX search_entry_tsv ON search_entry USING GIN (tsv)",
)


def tsvector_text(project_dir: str, text: str, prompt: bool = False) -> str:
    """tsvector input of an entry's tagged terms with their positions (from 1), weighted
    A in a prompt (D, the default, elsewhere)."""
    positions: dict[str, list[str]] = {}
    words = index_words(text)
    weight = "A" if prompt else ""
    # The project's term and the ALL_TAG one of a word share its position.
    for terms in (under(project_tag(project_dir), words), under(ALL_TAG, words)):
        for number, term in enumerate(terms, start=1):
            positions.setdefault(term, []).append(f"{min(number, _MAX_POSITION)}{weight}")
    # Terms are letters and digits only: nothing in them needs quoting but the quotes.
    return " ".join(f"'{term}':{','.join(places)}" for term, places in positions.items())


Connection = psycopg.Connection[tuple[Any, ...]]


class PostgresSearchIndex:
    """SearchIndex over PostgreSQL full-text search."""

    def __init__(self, pool: Pool, *, owns_pool: bool = True) -> None:
        self._pool = pool
        self._owns_pool = owns_pool

        def create(connection: Connection) -> None:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            connection.execute(
                "CREATE TABLE IF NOT EXISTS search_schema (version INTEGER NOT NULL,"
                " built BOOLEAN NOT NULL DEFAULT false)"
            )
            row = connection.execute("SELECT max(version) FROM search_schema").fetchone()
            if row is not None and row[0] == SCHEMA_VERSION:
                return
            connection.execute("DROP TABLE IF EXISTS search_schema, search_entry, search_file")
            connection.execute(
                "CREATE TABLE search_schema (version INTEGER NOT NULL,"
                " built BOOLEAN NOT NULL DEFAULT false)"
            )
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.execute("DELETE FROM search_schema")
            connection.execute("INSERT INTO search_schema VALUES (%s)", (SCHEMA_VERSION,))

        transaction(pool, create)

    def files(self) -> dict[str, FileState]:
        rows = fetch_all(
            self._pool,
            "SELECT file_id, path_key, project_dir, session_id, identity, indexed_to"
            " FROM search_file",
        )
        return {row[1]: FileState(*row) for row in rows}

    def reset_file(self, path_key: str, project_dir: str, session_id: str, identity: str) -> int:
        def work(connection: Connection) -> int:
            connection.execute("DELETE FROM search_file WHERE path_key = %s", (path_key,))
            row = connection.execute(
                "INSERT INTO search_file (path_key, project_dir, session_id, identity, indexed_to)"
                " VALUES (%s, %s, %s, %s, 0) RETURNING file_id",
                (path_key, project_dir, session_id, identity),
            ).fetchone()
            assert row is not None
            return int(row[0])

        return transaction(self._pool, work)

    def add_entries(
        self, file_id: int, rows: Sequence[EntryRow], start: int, indexed_to: int
    ) -> bool:
        def work(connection: Connection) -> bool:
            file = connection.execute(
                "SELECT path_key, project_dir, session_id, indexed_to FROM search_file"
                " WHERE file_id = %s FOR UPDATE",
                (file_id,),
            ).fetchone()
            if file is None:
                raise LookupError("file is not indexed")
            path_key, project_dir, session_id, progress = file
            if progress != start:
                return False
            pending = [(entry_key(path_key, row.offset, row.ts_ms), row) for row in rows]
            added = time.time_ns() // 1000
            while pending:
                values = [
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
                        row.has_photos,
                        row.text.replace("\0", " "),
                        tsvector_text(project_dir, row.text, bool(row.prompt)),
                        added,
                    )
                    for key, row in pending
                ]
                with connection.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO search_entry (key, file_id, line_start, line_end,"
                        " project_dir, session_id, uuid, type, role, timestamp, ts_ms,"
                        " has_photos, body, tsv, added_us)"
                        " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::tsvector,%s)"
                        " ON CONFLICT (key) DO NOTHING RETURNING key",
                        values,
                        returning=True,
                    )
                    # One result set per row, in order: empty where the key clashed.
                    taken: list[bool] = []
                    while True:
                        taken.append(cursor.fetchone() is not None)
                        if not cursor.nextset():
                            break
                # Two entries hashed to one key: the losers take the next key.
                pending = [
                    (key + 1, row)
                    for (key, row), done in zip(pending, taken, strict=True)
                    if not done
                ]
            connection.execute(
                "UPDATE search_file SET indexed_to = %s WHERE file_id = %s", (indexed_to, file_id)
            )
            return True

        return transaction(self._pool, work)

    def drop_file(self, path_key: str) -> None:
        transaction(
            self._pool,
            lambda c: c.execute("DELETE FROM search_file WHERE path_key = %s", (path_key,)),
        )

    def flush(self) -> None:
        """Nothing waits: each batch is its own transaction."""

    def search(
        self,
        query: Query,
        filters: Filters,
        projects: frozenset[str] | None,
        page: Page,
        limit: int,
    ) -> list[IndexHit]:
        scope = project_scope(filters, projects)
        if scope is not None and not scope:
            return []
        common: list[str] = []
        common_args: list[Any] = []
        if page.order == Order.NEWEST and page.before_key is not None:
            common.append("e.key < ?")
            common_args.append(page.before_key)
        if page.watermark is not None:
            common.append("e.added_us <= ?")
            common_args.append(page.watermark)
        sql_filters(filters, common, common_args)
        newest = page.order == Order.NEWEST
        order = "e.key DESC" if newest else "e.rank DESC, e.key DESC"
        size = limit if newest else page.offset + limit
        # One page per visible project, each of its own terms and from its own entries
        # (search_entry_project: a project's entries newest first), merged: the match
        # reads nothing of another project, and a walk never steps over its entries.
        pages: list[str] = []
        args: list[Any] = []
        for project in sorted(scope) if scope is not None else [None]:
            tsquery = query.tsquery(scope_tags(None if project is None else [project]))
            where = ["e.tsv @@ ?::tsquery"]
            args.extend([tsquery, tsquery])
            if project is not None:
                where.append("e.project_dir = ?")
                args.append(project)
            where.extend(common)
            args.extend(common_args)
            args.append(size)
            pages.append(
                f"(SELECT * FROM (SELECT e.*, ts_rank_cd(e.tsv, ?::tsquery, {_RANK_NORMALIZATION})"
                f" AS rank FROM search_entry e WHERE {' AND '.join(where)}) e"
                f" ORDER BY {order} LIMIT ?)"
            )
        # The page first, then its files: a join per matching entry would cost per match.
        sql = (
            "SELECT e.key, e.file_id, f.identity, e.project_dir, e.session_id, e.line_start,"
            " e.line_end, e.uuid, e.type, e.role, e.timestamp, e.has_photos, e.body"
            f" FROM (SELECT * FROM ({' UNION ALL '.join(pages)}) e"
            f" ORDER BY {order} LIMIT ? OFFSET ?) e"
            f" JOIN search_file f ON f.file_id = e.file_id ORDER BY {order}"
        )
        args.extend([limit, 0 if newest else page.offset])
        # Planned for its own tsquery each time: a prepared statement's generic plan
        # would walk every project's entries in key order instead of the GIN lists.
        rows = transaction(
            self._pool,
            lambda connection: connection.execute(
                sql.replace("?", "%s"), args, prepare=False
            ).fetchall(),
        )
        return [hit_of(row) for row in rows]

    def complete(self) -> bool:
        row = fetch_all(self._pool, "SELECT bool_and(built) FROM search_schema")
        return bool(row and row[0][0])

    def mark_complete(self) -> None:
        transaction(
            self._pool,
            lambda c: c.execute("UPDATE search_schema SET built = true WHERE NOT built"),
        )

    def close(self) -> None:
        if self._owns_pool:
            self._pool.close()


def sql_filters(filters: Filters, where: list[str], args: list[Any]) -> None:
    """The filters' SQL clauses (placeholders: `?`)."""
    if filters.project_dir:
        where.append("e.project_dir = ?")
        args.append(filters.project_dir)
    if filters.session_id:
        where.append("e.session_id = ?")
        args.append(filters.session_id)
    for column, values in (("type", filters.types), ("role", filters.roles)):
        if values:
            where.append(f"e.{column} IN ({','.join('?' * len(values))})")
            args.extend(values)
    if filters.start_ms is not None:
        where.append("e.ts_ms >= ?")
        args.append(filters.start_ms)
    if filters.end_ms is not None:
        where.append("e.ts_ms < ?")
        args.append(filters.end_ms)
    if filters.photos is not None:
        where.append("e.has_photos = ?")
        args.append(filters.photos)
