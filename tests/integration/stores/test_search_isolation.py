"""A search reads nothing of the projects its caller cannot see, on both index backends.

Contract §13: nothing reports on what the caller cannot see, timing
included. The index holds alice's project with a word in thousands of
entries; bob, who sees another project, searches for that word and for a
word that occurs nowhere. Both find nothing, and both must cost the same:
not as timed here (benchmarks are not tests; `scrollback bench` prints the
times), but by what the search reads: on Tantivy, only the indexes of bob's
projects are opened, and the one he reads holds neither word; on
PostgreSQL, the buffers of the plan `auto_explain` reports for the store's
statement. On PostgreSQL a page of bob's own words is read from his
entries, not by walking everyone's newest first. Also: an index written by
the previous schema (or engine) is rebuilt, not misread.
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

from history_service.search.embedded import (
    FORMAT,
    OLD_FILE_NAME,
    TantivySearchIndex,
    project_name,
)
from history_service.search.postgres import PostgresSearchIndex
from history_service.search.query import Filters, parse_query
from history_service.search.store import EntryRow, Order, Page, SearchIndex
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
    index.flush()


def _searches(
    index: SearchIndex, query: str, projects: frozenset[str] | None, order: Order = Order.NEWEST
) -> list[str]:
    found = index.search(parse_query(query), Filters(), projects, Page(order), 20)
    return [h.uuid for h in found]


def test_tantivy_search_reads_only_the_callers_projects(tmp_path: Path) -> None:
    _fill(TantivySearchIndex(tmp_path / "state"))  # closed by its owner's end: committed
    index = TantivySearchIndex(tmp_path / "state")
    try:
        for order in Order:
            assert len(_searches(index, "quince", ALICE, order)) == 20  # alice's word is indexed
            assert len(_searches(index, "quin*", None, order)) == 20  # found by who sees all
            assert _searches(index, '"own apple"', None, order) == ["b0"]
            assert _searches(index, "apple", BOB, order) == ["b0"]
        fresh = TantivySearchIndex(tmp_path / "state")
        try:
            for frequent, absent in PROBES:
                for order in Order:
                    assert _searches(fresh, frequent, BOB, order) == []
                    assert _searches(fresh, absent, BOB, order) == []
            # Bob's searches opened his project's index only ...
            assert set(fresh._projects) == {project_name("proj-b")}
            # ... which holds neither word: both cost a lookup of a word it does not have.
            searcher = fresh._projects[project_name("proj-b")].index.searcher()
            for word in ("quince", "zzyzx", "ripe"):
                assert searcher.doc_freq("body", word) == 0
            assert searcher.terms_with_prefix("body", "quin") == []
            assert searcher.doc_freq("body", "apple") == 1
        finally:
            fresh.close()
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
        for order in Order:
            assert len(_searches(index, "quince", ALICE, order)) == 20
            assert len(_searches(index, "quin*", None, order)) == 20
            assert _searches(index, '"own apple"', None, order) == ["b0"]
            assert _searches(index, "apple", BOB, order) == ["b0"]

        def blocks(query: str, order: Order) -> int:
            plans.clear()
            assert _searches(index, query, BOB, order) == []
            searches = [p for p in plans if "search_entry e" in p["Query Text"]]
            assert len(searches) == 1, [p["Query Text"] for p in plans]
            return _blocks(searches[0])

        # Again and again: a statement prepared after a few runs (psycopg) may get a
        # generic plan, which must not walk every entry either. Relevance ranks every
        # visible match, and reads no more than newest first for what is hidden.
        for _ in range(4):
            for frequent, absent in PROBES:
                for order in Order:
                    assert blocks(frequent, order) <= blocks(absent, order) + 2 < 20, (
                        frequent,
                        absent,
                        order,
                    )
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
    """A state dir with the FTS5 index of earlier versions (and its WAL)."""
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / OLD_FILE_NAME) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript(
            """
            CREATE VIRTUAL TABLE search_text USING fts5 (body);
            INSERT INTO search_text (rowid, body) VALUES (7, 'an old medlar');
            """
        )
    connection.close()
    yield state


def test_the_old_fts5_index_is_dropped_and_rebuilt(old_sqlite_index: Path) -> None:
    index = TantivySearchIndex(old_sqlite_index)
    try:
        assert not any(p.name.startswith(OLD_FILE_NAME) for p in old_sqlite_index.iterdir())
        # Nothing indexed yet: built again by the indexer, and partial until then.
        assert index.files() == {} and not index.complete()
        _fill(index)
        assert _searches(index, "apple", BOB) == ["b0"]
        index.mark_complete()
        assert index.complete()
    finally:
        index.close()
    # Opening it again keeps it (its format matches) ...
    index = TantivySearchIndex(old_sqlite_index)
    try:
        assert index.complete() and _searches(index, "apple", BOB) == ["b0"]
        assert set(index.files()) == {"proj-a/s.jsonl", "proj-b/t.jsonl"}
    finally:
        index.close()
    # ... and an index of another format is dropped and built again.
    (old_sqlite_index / "search" / "format").write_text(FORMAT + "-old")
    index = TantivySearchIndex(old_sqlite_index)
    try:
        assert index.files() == {} and not index.complete()
        assert _searches(index, "apple", BOB) == []
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
