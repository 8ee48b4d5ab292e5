"""ONE contract for the insight index's store (history_service.insight.InsightStore) on both backends.

Every method with the same expectations on SQLite and PostgreSQL: a first
apply creates the row, later applies add counts and keep each message.id
once (the field-wise maximum of its usage), the compare-and-set refuses a
writer whose base is stale (nothing changes), a reset drops the old rows,
links and parent_of, and two "replicas" (two store instances) racing from
the same base: exactly one wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from history_service.insight import IndexDelta, IndexState, InsightStore, MessageUsage, Usage
from history_service.store.insight import PostgresInsightStore, SqliteInsightStore
from history_service.tokens import FileIdentity
from scrollback.state.postgres import Pool, open_pool

KEY = ("proj", "sess")
# A head hash over 2**63: stored signed, read back unsigned.
IDENTITY = FileIdentity(66306, 1234567, 4096, (1 << 64) - 12345, 0)


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
        FileIdentity(IDENTITY.dev, IDENTITY.ino, IDENTITY.head_len, IDENTITY.head_hash, offset),
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
