"""A search reads nothing of the projects its caller cannot see, on both index backends.

Contract §13: nothing reports on what the caller cannot see, timing
included. The index holds alice's project with a word in thousands of
entries; bob, who sees another project, searches for that word and for a
word that occurs nowhere. Both find nothing, and both must cost the same:
not as timed here (benchmarks are not tests; `scrollback bench` prints the
times), but as the database counts its own work for the store's query:
SQLite's virtual machine steps (a progress handler on the store's
connection) and PostgreSQL's buffers (the plan `auto_explain` reports for
the store's statement). On PostgreSQL a page of bob's own words is read
from his entries, not by walking everyone's newest first. Also: an index
written by the previous schema is rebuilt, not misread.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

from history_service.search.postgres import PostgresSearchIndex
from history_service.search.query import Filters, parse_query
from history_service.search.sqlite import FILE_NAME, SqliteSearchIndex
from history_service.search.store import EntryRow, SearchIndex
from scrollback.state.postgres import open_pool

FREQUENT = 3000
ALICE, BOB = frozenset({"proj-a"}), frozenset({"proj-b"})
# (the word frequent in alice's entries, a word that occurs nowhere), as words and prefixes
PROBES = (("quince", "zzyzx"), ("quin*", "zzyz*"), ('"ripe quince"', '"ripe zzyzx"'))


def _fill(index: SearchIndex) -> None:
    """alice: FREQUENT entries with "ripe quince"; bob: a few entries of his own."""
    alice = index.reset_file("proj-a/s.jsonl", "proj-a", "s", "1:2:3:4")
    rows = [
        EntryRow(n * 100, n * 100 + 99, f"a{n}", "user", "user", "t", 1000 + n, False, text)
        for n, text in enumerate(
            f"entry {n} of a ripe quince and other fruit" for n in range(FREQUENT)
        )
    ]
    for start in range(0, FREQUENT, 500):
        assert index.add_entries(alice, rows[start : start + 500], start * 100, (start + 500) * 100)
    bob = index.reset_file("proj-b/t.jsonl", "proj-b", "t", "5:6:7:8")
    mine = [EntryRow(0, 50, "b0", "user", "user", "t", 5000, False, "bob's own apple")]
    assert index.add_entries(bob, mine, 0, 50)


def _searches(index: SearchIndex, query: str, projects: frozenset[str] | None) -> list[str]:
    return [h.uuid for h in index.search(parse_query(query), Filters(), projects, None, 20)]


def test_sqlite_search_steps_do_not_depend_on_hidden_matches(tmp_path: Path) -> None:
    index = SqliteSearchIndex(tmp_path / "state")
    try:
        _fill(index)
        assert len(_searches(index, "quince", ALICE)) == 20  # alice's word is indexed
        assert len(_searches(index, "quin*", None)) == 20  # and found by who sees everything
        assert _searches(index, '"own apple"', None) == _searches(index, "apple", BOB) == ["b0"]
        connection = index._connection()  # this thread's: the one the searches below use

        def steps(query: str) -> int:
            count = 0

            def tick() -> int:
                nonlocal count
                count += 1
                return 0

            connection.set_progress_handler(tick, 1)
            try:
                assert _searches(index, query, BOB) == []
            finally:
                connection.set_progress_handler(None, 1)
            return count

        for _ in range(3):  # again and again: a cached statement must not change that
            for frequent, absent in PROBES:
                assert steps(frequent) <= steps(absent) + 10 < 1000, (frequent, absent)
    finally:
        index.close()


def _explaining_pool(url: str, plans: list[dict[str, Any]]) -> psycopg_pool.ConnectionPool[Any]:
    """One connection that reports the plan, with buffers, of every statement it runs."""
    open_pool(url, name="search-migrate").close()  # the state schema, as servers see it

    def notice(diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        if "plan:" in message:
            plans.append(json.loads(message.split("plan:", 1)[1]))

    def configure(connection: psycopg.Connection[Any]) -> None:
        connection.add_notice_handler(notice)
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_buffers = on",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
        ):
            connection.execute(setting)
        connection.commit()

    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        url, min_size=1, max_size=1, configure=configure, open=False
    )
    pool.open(wait=True, timeout=10)
    return pool


def _blocks(plan: dict[str, Any]) -> int:
    node = plan["Plan"]
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


def test_postgres_search_buffers_do_not_depend_on_hidden_matches(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    plans: list[dict[str, Any]] = []
    pool = _explaining_pool(url, plans)
    index = PostgresSearchIndex(pool)
    try:
        _fill(index)
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("VACUUM ANALYZE search_entry")
        assert len(_searches(index, "quince", ALICE)) == 20
        assert len(_searches(index, "quin*", None)) == 20
        assert _searches(index, '"own apple"', None) == _searches(index, "apple", BOB) == ["b0"]

        def blocks(query: str) -> int:
            plans.clear()
            assert _searches(index, query, BOB) == []
            searches = [p for p in plans if "search_entry e" in p["Query Text"]]
            assert len(searches) == 1, [p["Query Text"] for p in plans]
            return _blocks(searches[0])

        # Again and again: a statement prepared after a few runs (psycopg) may get a
        # generic plan, which must not walk every entry either.
        for _ in range(4):
            for frequent, absent in PROBES:
                assert blocks(frequent) <= blocks(absent) + 2 < 20, (frequent, absent)
    finally:
        index.close()


@pytest.mark.parametrize("bob", [BOB, BOB | {"proj-c"}], ids=["one-project", "two-projects"])
def test_postgres_page_of_own_words_does_not_step_over_hidden_entries(
    make_database: Callable[[], str], bob: frozenset[str]
) -> None:
    # bob's entries are a tenth of alice's, spread in time among hers, a word in each: a page
    # of his must be read from his entries, not by walking everyone's newest first.
    url = make_database()
    plans: list[dict[str, Any]] = []
    index = PostgresSearchIndex(_explaining_pool(url, plans))
    try:
        for project, count, spacing, text in (
            ("proj-a", 20_000, 1, "alice writes"),
            ("proj-b", 2_000, 10, "bob writes pear"),
            ("proj-c", 100, 200, "bob writes pear too"),
        ):
            file_id = index.reset_file(f"{project}/s.jsonl", project, "s", "1:2:3:4")
            rows = [
                EntryRow(
                    n * 10,
                    n * 10 + 9,
                    f"{project}{n}",
                    "user",
                    "user",
                    "t",
                    1000 + n * spacing,
                    False,
                    f"{text} {n}",
                )
                for n in range(count)
            ]
            for start in range(0, count, 500):
                assert index.add_entries(
                    file_id, rows[start : start + 500], start * 10, (start + 500) * 10
                )
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("VACUUM ANALYZE search_entry")
        for _ in range(6):
            plans.clear()
            assert len(_searches(index, "pear", bob)) == 20
            (plan,) = [p for p in plans if "search_entry e" in p["Query Text"]]
            assert _blocks(plan) < 15 * len(bob)
    finally:
        index.close()


@pytest.fixture
def old_sqlite_index(tmp_path: Path) -> Iterator[Path]:
    """A search.sqlite as the previous schema wrote it: text in FTS5, no version."""
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / FILE_NAME) as connection:
        connection.executescript(
            """
            CREATE TABLE search_file (file_id INTEGER PRIMARY KEY, path_key TEXT NOT NULL UNIQUE,
                project_dir TEXT NOT NULL, session_id TEXT NOT NULL, identity TEXT NOT NULL,
                indexed_to INTEGER NOT NULL);
            CREATE TABLE search_entry (key INTEGER PRIMARY KEY, file_id INTEGER NOT NULL,
                line_start INTEGER NOT NULL, line_end INTEGER NOT NULL,
                project_dir TEXT NOT NULL, session_id TEXT NOT NULL, uuid TEXT NOT NULL,
                type TEXT NOT NULL, role TEXT NOT NULL, timestamp TEXT NOT NULL, ts_ms INTEGER,
                has_photos INTEGER NOT NULL);
            CREATE VIRTUAL TABLE search_text USING fts5 (body);
            INSERT INTO search_file VALUES (1, 'proj-a/s.jsonl', 'proj-a', 's', '1:2:3:4', 99);
            INSERT INTO search_entry VALUES (7, 1, 0, 99, 'proj-a', 's', 'u', 'user', 'user',
                't', 1, 0);
            INSERT INTO search_text (rowid, body) VALUES (7, 'an old medlar');
            """
        )
    connection.close()
    yield state


def test_an_index_of_the_previous_schema_is_rebuilt(old_sqlite_index: Path) -> None:
    index = SqliteSearchIndex(old_sqlite_index)
    try:
        # Forgotten, so the indexer reads every transcript again into the new tables.
        assert index.files() == {}
        assert _searches(index, "medlar", ALICE) == []
        _fill(index)
        assert _searches(index, "apple", BOB) == ["b0"]
        index.drop_file("proj-a/s.jsonl")
        index.drop_file("proj-b/t.jsonl")
        # A contentless row is deleted by its terms: none may stay behind.
        connection = index._connection()
        for table in ("search_text", "search_all"):
            connection.execute(
                f"CREATE VIRTUAL TABLE temp.{table}_terms USING fts5vocab(main, {table}, row)"
            )
            assert connection.execute(f"SELECT count(*) FROM temp.{table}_terms").fetchone() == (0,)
    finally:
        index.close()
    # Opening it again keeps it (the version matches).
    index = SqliteSearchIndex(old_sqlite_index)
    try:
        _fill(index)
        index.close()
        index = SqliteSearchIndex(old_sqlite_index)
        assert _searches(index, "apple", BOB) == ["b0"]
    finally:
        index.close()


def test_a_postgres_index_of_the_previous_schema_is_rebuilt(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    pool = open_pool(url, name="search-old")
    with pool.connection() as connection:
        connection.execute(
            "CREATE TABLE search_file (file_id BIGSERIAL PRIMARY KEY, path_key TEXT NOT NULL"
            " UNIQUE, project_dir TEXT NOT NULL, session_id TEXT NOT NULL, identity TEXT NOT NULL,"
            " indexed_to BIGINT NOT NULL)"
        )
        connection.execute(
            "INSERT INTO search_file (path_key, project_dir, session_id, identity, indexed_to)"
            " VALUES ('proj-a/s.jsonl', 'proj-a', 's', '1:2:3:4', 99)"
        )
    index = PostgresSearchIndex(pool)
    try:
        assert index.files() == {}
        _fill(index)
        assert _searches(index, "apple", BOB) == ["b0"]
        assert len(_searches(index, '"ripe quince"', ALICE)) == 20
    finally:
        index.close()
    index = PostgresSearchIndex(open_pool(url, name="search-again"))
    try:
        assert set(index.files()) == {"proj-a/s.jsonl", "proj-b/t.jsonl"}
    finally:
        index.close()
