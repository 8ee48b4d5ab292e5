"""ONE contract for the insight index's store (history_service.insight_model.InsightStore) on both backends.

Every method with the same expectations on SQLite and PostgreSQL: a first
apply creates the row, later applies add counts and keep each message.id
once (the field-wise maximum of its usage), the compare-and-set refuses a
writer whose base is stale (nothing changes), a reset drops the old rows,
links and parent_of, and two "replicas" (two store instances) racing from
the same base: exactly one wins.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from history_service.insight_model import IndexDelta, IndexState, InsightStore, MessageUsage, Usage
from history_service.store.insight import PostgresInsightStore, SqliteInsightStore
from scrollback.linefile import FileIdentity, FileVersion
from scrollback.state import postgres as pg_state
from scrollback.state import sqlite as sqlite_state
from scrollback.state.postgres import Pool, open_pool

KEY = ("proj", "sess")
# A head hash over 2**63: stored signed, read back unsigned.
IDENTITY = FileIdentity(FileVersion(66306, 1234567, 4096, (1 << 64) - 12345), 0)


@dataclass
class Stores:
    """A store, and a way to open another 'replica' on the same database."""

    store: InsightStore
    replica: Callable[[], InsightStore]
    closers: list[Callable[[], None]] = field(default_factory=list)


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    closers: list[Callable[[], None]] = []
    if request.param == "sqlite":

        def replica() -> InsightStore:
            store = SqliteInsightStore(tmp_path)
            closers.append(store.close)
            return store

    else:
        url: str = request.getfixturevalue("pg_url")

        def replica() -> InsightStore:
            pool: Pool = open_pool(url, name="insight-contract", max_size=4)
            closers.append(pool.close)
            return PostgresInsightStore(pool)

    yield Stores(replica(), replica, closers)
    for close in reversed(closers):
        close()


def _state(offset: int) -> IndexState:
    return IndexState(
        IDENTITY.at(offset),
        offset,
    )


def _delta(**messages: tuple[int, int]) -> IndexDelta:
    delta = IndexDelta(entry_counts={"assistant": len(messages), "user": 1}, photos=1)
    delta.first_time_us, delta.last_time_us = 1_000, 2_000
    for message_id, (input_tokens, output) in messages.items():
        delta.messages[message_id] = MessageUsage(
            "claude-sonnet-4-5", Usage(input_tokens, output, 3, 4)
        )
    return delta


def test_apply_adds_and_counts_each_message_once(stores: Stores) -> None:
    store = stores.store
    assert store.state(*KEY) is None and store.insight(*KEY) is None
    assert store.apply(*KEY, None, False, _delta(m1=(10, 1), m2=(20, 2)), _state(100))
    assert store.state(*KEY) == _state(100)
    later = _delta(m1=(10, 50), m3=(5, 5))
    later.first_time_us, later.last_time_us = 500, 1_500
    assert store.apply(*KEY, _state(100), False, later, _state(250))
    insight = store.insight(*KEY)
    assert insight is not None
    assert insight.entry_counts == {"assistant": 4, "user": 2}
    assert insight.photos == 2
    assert (insight.first_time_us, insight.last_time_us) == (500, 2_000)
    assert insight.indexed_bytes == 250
    (model,) = insight.models
    assert model.messages == 3
    # m1's output is its maximum (50), not 1 + 50; cache counts once per message.
    assert model.usage == Usage(10 + 20 + 5, 50 + 2 + 5, 9, 12)


def test_stale_base_changes_nothing(stores: Stores) -> None:
    store = stores.store
    assert store.apply(*KEY, None, False, _delta(m1=(1, 1)), _state(10))
    assert not store.apply(*KEY, None, False, _delta(m2=(1, 1)), _state(20))
    assert not store.apply(*KEY, _state(5), False, _delta(m2=(1, 1)), _state(20))
    assert store.state(*KEY) == _state(10)
    insight = store.insight(*KEY)
    assert insight is not None and insight.models[0].messages == 1


def test_reset_drops_the_old_rows(stores: Stores) -> None:
    store = stores.store
    first = _delta(m1=(1, 1))
    first.links["toolu_1"] = "agent-x"
    assert store.apply(*KEY, None, False, first, _state(10))
    assert store.links(*KEY) == {"toolu_1": "agent-x"}
    assert store.parent_of("proj", "agent-x") == ("sess", "toolu_1")
    assert store.parent_of("other", "agent-x") is None
    assert store.apply(*KEY, _state(10), True, _delta(m9=(7, 7)), _state(3))
    insight = store.insight(*KEY)
    assert insight is not None and insight.models[0].usage == Usage(7, 7, 3, 4)
    assert insight.entry_counts == {"assistant": 1, "user": 1} and insight.photos == 1
    assert store.links(*KEY) == {} and store.parent_of("proj", "agent-x") is None


def test_last_activity_lists_every_timestamped_transcript_in_one_call(stores: Stores) -> None:
    store = stores.store
    assert store.last_activity("") == {}
    assert store.apply(*KEY, None, False, _delta(m1=(1, 1)), _state(10))
    assert store.apply("proj", "later", None, False, _delta(m2=(1, 1)), _state(30))
    assert store.apply(*KEY, _state(10), False, _delta(m3=(1, 1)), _state(20))
    untimed = _delta()
    untimed.first_time_us = untimed.last_time_us = None
    assert store.apply("other", "untimed", None, False, untimed, _state(5))
    timed = _delta()
    timed.last_time_us = 9_000
    assert store.apply("other", "timed", None, False, timed, _state(7))
    assert store.last_activity("") == {
        KEY: (20, 2_000),
        ("proj", "later"): (30, 2_000),
        ("other", "timed"): (7, 9_000),
    }
    assert store.last_activity("other") == {("other", "timed"): (7, 9_000)}
    assert store.last_activity("none") == {}


def test_two_replicas_racing_from_one_base_one_wins(stores: Stores) -> None:
    assert stores.store.apply(*KEY, None, False, _delta(m1=(1, 1)), _state(10))
    others = [stores.replica() for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(
                lambda s: s.apply(*KEY, _state(10), False, _delta(m2=(2, 2)), _state(20)),
                others,
            )
        )
    assert results.count(True) == 1
    insight = stores.store.insight(*KEY)
    assert insight is not None and insight.entry_counts == {"assistant": 2, "user": 2}


def test_kept_model_totals_always_equal_the_sums_of_the_messages(stores: Stores) -> None:
    """Migration 7's per-model totals, after batches that revisit ids, models and a reset."""
    rng = random.Random(7)
    store = stores.store
    models = ("claude-opus-4-1", "claude-sonnet-4-5", "mystery-model")
    truth: dict[str, MessageUsage] = {}
    base: IndexState | None = None
    for batch in range(30):
        reset = batch == 12
        if reset:
            truth = {}
        delta = IndexDelta(entry_counts={"assistant": 1})
        for _ in range(rng.randint(1, 40)):
            message_id = f"m{rng.randint(0, 80)}"
            usage = MessageUsage(
                rng.choice(models), Usage(*(rng.randint(0, 1000) for _ in range(4)))
            )
            seen = delta.messages.get(message_id)
            delta.messages[message_id] = usage if seen is None else seen.merge(usage)
        for message_id, usage in delta.messages.items():
            seen = truth.get(message_id)
            truth[message_id] = usage if seen is None else seen.merge(usage)
        state = _state(100 * (batch + 1))
        assert store.apply(*KEY, base, reset, delta, state)
        base = state
        insight = store.insight(*KEY)
        assert insight is not None
        expected: dict[str, tuple[Usage, int]] = {}
        for usage in truth.values():
            total, count = expected.get(usage.model, (Usage(), 0))
            expected[usage.model] = (total + usage.usage, count + 1)
        assert {m.model: (m.usage, m.messages) for m in insight.models} == expected, batch
        order = [(-m.usage.output, m.model) for m in insight.models]
        assert order == sorted(order), "most output tokens first"


MIGRATION_7_MESSAGES = (
    ("p", "s1", "m1", "claude-sonnet-4-5", 10, 20, 30, 40),
    ("p", "s1", "m2", "claude-sonnet-4-5", 1, 2, 3, 4),
    ("p", "s1", "m3", "claude-opus-4-1", 5, 6, 7, 8),
    ("p", "s2", "m1", "claude-sonnet-4-5", 100, 200, 300, 400),
)


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_migration_7_fills_model_totals_from_indexed_messages(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A database indexed at version 6 reads the same totals after migration 7, and keeps
    them right when a message it already had grows."""
    insert_file = (
        "INSERT INTO insight_file (project_dir, session_id, device, inode, head_len, head_hash,"
        " indexed_offset, photo_count, first_time_us, last_time_us, updated_at)"
        " VALUES ({0}, {0}, 1, 2, 0, 0, 100, 0, NULL, NULL, 0)"
    )
    insert_message = (
        "INSERT INTO insight_message (project_dir, session_id, message_id, model, input_tokens,"
        " output_tokens, cache_creation_tokens, cache_read_tokens)"
        " VALUES ({0}, {0}, {0}, {0}, {0}, {0}, {0}, {0})"
    )
    store: InsightStore
    pool: Pool | None = None
    if name == "sqlite":
        lite = sqlite3.connect(tmp_path / "scrollback.db")
        lite.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)"
        )
        for version, sql in sqlite_state.MIGRATIONS:
            if version >= 7:
                break
            for statement in sqlite_state.migration_statements(sql):
                lite.execute(statement)
            lite.execute("INSERT INTO schema_migrations VALUES (?, 0)", (version,))
        for session in ("s1", "s2"):
            lite.execute(insert_file.format("?"), ("p", session))
        lite.executemany(insert_message.format("?"), MIGRATION_7_MESSAGES)
        lite.commit()
        lite.close()
        store = SqliteInsightStore(tmp_path)
    else:
        url = request.getfixturevalue("make_database")()
        with psycopg.connect(url) as connection:
            connection.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                " applied_at DOUBLE PRECISION NOT NULL)"
            )
            for version, sql in pg_state.MIGRATIONS:
                if version >= 7:
                    break
                for statement in pg_state.migration_statements(sql):
                    connection.execute(statement)
                connection.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (version,))
            for session in ("s1", "s2"):
                connection.execute(insert_file.format("%s"), ("p", session))
            with connection.cursor() as cursor:
                cursor.executemany(insert_message.format("%s"), MIGRATION_7_MESSAGES)
        pool = open_pool(url, name="migration-7", max_size=2)
        store = PostgresInsightStore(pool)
    try:
        s1 = store.insight("p", "s1")
        assert s1 is not None
        assert {m.model: (m.usage, m.messages) for m in s1.models} == {
            "claude-sonnet-4-5": (Usage(11, 22, 33, 44), 2),
            "claude-opus-4-1": (Usage(5, 6, 7, 8), 1),
        }
        s2 = store.insight("p", "s2")
        assert s2 is not None and s2.models[0].usage == Usage(100, 200, 300, 400)
        # m1 of s1 grows (its final line) and m9 is new: the kept totals follow.
        base = store.state("p", "s1")
        delta = IndexDelta()
        delta.messages["m1"] = MessageUsage("claude-sonnet-4-5", Usage(10, 25, 30, 40))
        delta.messages["m9"] = MessageUsage("claude-opus-4-1", Usage(1, 1, 1, 1))
        assert base is not None
        assert store.apply("p", "s1", base, False, delta, IndexState.at(base.identity, 200))
        after = store.insight("p", "s1")
        assert after is not None
        assert {m.model: (m.usage, m.messages) for m in after.models} == {
            "claude-sonnet-4-5": (Usage(11, 27, 33, 44), 2),
            "claude-opus-4-1": (Usage(6, 7, 8, 9), 2),
        }
    finally:
        store.close()
        if pool is not None:
            pool.close()
