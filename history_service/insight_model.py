"""The values of session insight (docs/contract.md §13) and the store that keeps them.

Totals (`Usage`, `ModelTotals`, `Insight`), how far a transcript was read
(`IndexState`), what a batch of lines adds (`IndexDelta`, `MessageUsage`)
and the store protocol (`InsightStore`) the SQLite and PostgreSQL stores
implement (history_service.store.insight).

Cost is an estimate from list prices (PRICES below); a model whose family is
not in the table counts its tokens but no cost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from scrollback.linefile import FileIdentity


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float


# List prices per model family, USD per million tokens, from Anthropic's
# pricing page (https://www.anthropic.com/pricing, "API pricing", as of
# 2025-11; cache writes at the 5-minute rate). An estimate, not a bill:
# batch, long-context and 1-hour cache rates are not modelled. First match wins.
# OpenAI models (Codex), from https://openai.com/api/pricing as of 2025-09: cached
# input at its own rate, no cache-write charge.
PRICES: tuple[tuple[re.Pattern[str], Price], ...] = (
    (re.compile(r"^gpt-5(\.\d+)?-mini"), Price(0.25, 2.0, 0.0, 0.025)),
    (re.compile(r"^gpt-5(\.\d+)?-nano"), Price(0.05, 0.40, 0.0, 0.005)),
    (re.compile(r"^gpt-5(-codex)?(-\d{4}-\d{2}-\d{2})?$"), Price(1.25, 10.0, 0.0, 0.125)),
    (re.compile(r"^o3(-\d{4}-\d{2}-\d{2})?$"), Price(2.0, 8.0, 0.0, 0.50)),
    (re.compile(r"^o4-mini"), Price(1.10, 4.40, 0.0, 0.275)),
    (re.compile(r"^gpt-4\.1(-\d{4}-\d{2}-\d{2})?$"), Price(2.0, 8.0, 0.0, 0.50)),
    (re.compile(r"claude-opus-4-[5-9]"), Price(5.0, 25.0, 6.25, 0.50)),
    (re.compile(r"claude-(opus-4|3-opus)"), Price(15.0, 75.0, 18.75, 1.50)),
    (re.compile(r"claude-(sonnet-4|3-7-sonnet|3-5-sonnet)"), Price(3.0, 15.0, 3.75, 0.30)),
    (re.compile(r"claude-haiku-4"), Price(1.0, 5.0, 1.25, 0.10)),
    (re.compile(r"claude-3-5-haiku"), Price(0.80, 4.0, 1.0, 0.08)),
    (re.compile(r"claude-3-haiku"), Price(0.25, 1.25, 0.30, 0.03)),
)


def price_of(model: str) -> Price | None:
    """The model family's list price, or None when it is not in the table."""
    for pattern, price in PRICES:
        if pattern.search(model):
            return price
    return None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_creation + other.cache_creation,
            self.cache_read + other.cache_read,
        )

    def cost(self, price: Price) -> float:
        """The cost in US dollars at that price."""
        return (
            self.input * price.input
            + self.output * price.output
            + self.cache_creation * price.cache_write
            + self.cache_read * price.cache_read
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class ModelTotals:
    """One model's usage within a session."""

    model: str
    usage: Usage
    messages: int

    @property
    def cost(self) -> float | None:
        """The estimated cost, or None for a model not in the price table."""
        price = price_of(self.model)
        return None if price is None else self.usage.cost(price)


@dataclass(frozen=True, slots=True)
class Insight:
    """What one transcript (or several, added up) holds."""

    entry_counts: dict[str, int] = field(default_factory=dict)
    photos: int = 0
    first_time_us: int | None = None
    last_time_us: int | None = None
    models: tuple[ModelTotals, ...] = ()
    indexed_bytes: int = 0

    @property
    def usage(self) -> Usage:
        """The usage over all models."""
        total = Usage()
        for model in self.models:
            total = total + model.usage
        return total

    @property
    def cost(self) -> float:
        """The estimated cost over the models in the price table."""
        return sum(m.cost or 0.0 for m in self.models)

    @property
    def cost_complete(self) -> bool:
        """True when every model with usage is priced."""
        return all(m.cost is not None or m.usage == Usage() for m in self.models)

    def __add__(self, other: Insight) -> Insight:
        counts = dict(self.entry_counts)
        for kind, count in other.entry_counts.items():
            counts[kind] = counts.get(kind, 0) + count
        by_model: dict[str, ModelTotals] = {m.model: m for m in self.models}
        for m in other.models:
            mine = by_model.get(m.model)
            by_model[m.model] = (
                m
                if mine is None
                else ModelTotals(m.model, mine.usage + m.usage, mine.messages + m.messages)
            )
        return Insight(
            counts,
            self.photos + other.photos,
            earlier(self.first_time_us, other.first_time_us),
            later(self.last_time_us, other.last_time_us),
            tuple(sorted(by_model.values(), key=lambda m: (-m.usage.output, m.model))),
            self.indexed_bytes + other.indexed_bytes,
        )


def earlier(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional times (None: not known)."""
    return b if a is None else a if b is None else min(a, b)


def later(a: int | None, b: int | None) -> int | None:
    """The larger of two optional times (None: not known)."""
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True, slots=True)
class IndexState:
    """How far one transcript was indexed, and the file version it was.

    The identity's size is always the offset (what the store keeps): a file
    shorter than that was rewritten.
    """

    identity: FileIdentity
    offset: int

    @classmethod
    def at(cls, identity: FileIdentity, offset: int) -> IndexState:
        """The state of a file version read up to `offset`."""
        return cls(identity.at(offset), offset)


@dataclass(frozen=True, slots=True)
class MessageUsage:
    """One assistant message's model and usage."""

    model: str
    usage: Usage

    def merge(self, other: MessageUsage) -> MessageUsage:
        """The same message seen again: the field-wise maximum (the model first seen)."""
        a, b = self.usage, other.usage
        return MessageUsage(
            self.model or other.model,
            Usage(
                max(a.input, b.input),
                max(a.output, b.output),
                max(a.cache_creation, b.cache_creation),
                max(a.cache_read, b.cache_read),
            ),
        )


@dataclass(slots=True)
class IndexDelta:
    """What a run of lines adds to the index."""

    entry_counts: dict[str, int] = field(default_factory=dict)
    photos: int = 0
    first_time_us: int | None = None
    last_time_us: int | None = None
    messages: dict[str, MessageUsage] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    lines: int = 0
    bytes: int = 0


class InsightStore(Protocol):
    """The insight index. Every method blocks: call it from a worker thread.

    Transcripts are keyed by (project_dir, session_id): a session id alone
    may be shared by two projects.
    """

    def state(self, project_dir: str, session_id: str) -> IndexState | None:
        """How far that transcript was indexed, or None if never."""
        ...

    def apply(
        self,
        project_dir: str,
        session_id: str,
        base: IndexState | None,
        reset: bool,
        delta: IndexDelta,
        new_state: IndexState,
    ) -> bool:
        """Add a delta and move the state to `new_state`, in one transaction.

        Only if the stored state is still `base` (None: no row): otherwise
        another writer moved it and nothing changes (False). With `reset`,
        the transcript's rows are dropped first (a rewritten file). A message
        already indexed under the same id takes the field-wise maximum.
        """
        ...

    def insight(self, project_dir: str, session_id: str) -> Insight | None:
        """The indexed totals of one transcript, or None if never indexed."""
        ...

    def last_activity(self, project_dir: str) -> dict[tuple[str, str], tuple[int, int]]:
        """(project_dir, session_id) -> (indexed offset, last entry time in microseconds) of
        every indexed transcript with a timestamped entry, of one project if `project_dir`
        is not empty: one query for a whole listing."""
        ...

    def links(self, project_dir: str, session_id: str) -> dict[str, str]:
        """tool_use id -> sub-agent session id, for the calls of one parent transcript."""
        ...

    def parent_of(self, project_dir: str, agent_session_id: str) -> tuple[str, str] | None:
        """(parent session id, tool_use id) of a sub-agent, if a parent's link names it."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...
