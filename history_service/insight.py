"""Session insight (docs/contract.md §13): what a transcript holds, kept in an index.

Per transcript the index keeps entry counts by type, the photo count, the
time span, one row per assistant `message.id` (model and usage) and the links
from tool calls to the sub-agents they started. Token usage is counted once
per `message.id`: Claude Code writes one assistant message as several lines
(one per content block) that share its id and each repeat its usage, so a
naive sum over lines over-counts. Each id counts once, with the field-wise
maximum of its lines' usage: the lines of a streamed message repeat its input
and cache counts, while output_tokens grows (often 1 on the first line and
the final count on the last; seen in the corpus), so the maximum is the
final usage and the first line alone would under-count output.

The index is incremental: it remembers how far it read (the end of the last
complete line) and the file's identity (device, inode, head hash: the page
token's FileIdentity). A file that only grew is read from there; one that was
rewritten (other inode, shrank, other head, offset no longer a line start) is
read again from the start. Lines go through the stripper first (payloads cut
at a small inline limit) and are parsed one at a time, and changes are
written in batches, so memory stays bounded on multi-GB sessions.

Sub-agent links come from the parent's tool result: a `user` entry whose
`toolUseResult` names an `agentId` and whose content holds the `tool_result`
of the Task call (`tool_use_id`). The sub-agent transcript is
`agent-<agentId>.jsonl` (docs/contract.md §1 layout).

Cost is an estimate from list prices (PRICES below); a model whose family is
not in the table counts its tokens but no cost.

Codex rollouts (source "codex") count usage from their `event_msg`
`token_count` lines, whose `info.total_token_usage` is cumulative over the
session (`input_tokens` includes `cached_input_tokens`). Each distinct
cumulative total is a row keyed by that total (so a token_count written twice
counts once), holding its growth over the previous total, in our fields:
input = uncached input, cache_read = cached input, output = output (reasoning
included). A total below the previous one in any field starts a new segment
(a resumed session counts from zero again), whose rows are keyed apart, so the
rows of a session add up to the sum of each segment's last total, and
each row's model is the one the last `turn_context` named, so the models'
totals split it by model. The running state (current model, last total) of
a rollout is kept in memory per index position; a worker that lacks it (a
restart, another replica moved the index) reads the rollout again from its
start. Photos of a rollout are those of its `response_item` lines: the
`event_msg` copy of a user message and a compaction's replacement history
repeat images already counted.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from history_service.errors import FileRewrittenError
from history_service.lines import MediaMode, RawLine, is_blank, iter_lines_forward, serve_line
from scrollback.contract.stripping import StrippedLine, parse_json_object
from scrollback.contract.text import indexable
from scrollback.layouts import CODEX
from scrollback.linefile import NEWLINE, ByteSource, FileIdentity, LineFile
from scrollback.transcripts import TranscriptFile, TranscriptSource

# Payloads at or over this many bytes are cut before a line is parsed: the
# index never needs them, and the parse stays small.
INSIGHT_INLINE_LIMIT = 1024
# Changes are written (and the offset advanced) after this many lines or bytes.
BATCH_LINES = 5000
BATCH_BYTES = 64 * 1024 * 1024
AGENT_PREFIX = "agent-"


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
            _min(self.first_time_us, other.first_time_us),
            _max(self.last_time_us, other.last_time_us),
            tuple(sorted(by_model.values(), key=lambda m: (-m.usage.output, m.model))),
            self.indexed_bytes + other.indexed_bytes,
        )


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
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

    def links(self, project_dir: str, session_id: str) -> dict[str, str]:
        """tool_use id -> sub-agent session id, for the calls of one parent transcript."""
        ...

    def parent_of(self, project_dir: str, agent_session_id: str) -> tuple[str, str] | None:
        """(parent session id, tool_use id) of a sub-agent, if a parent's link names it."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...


def timestamp_us(text: object) -> int | None:
    """An entry's ISO 8601 timestamp in microseconds since the epoch (naive = UTC), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def message_usage(entry: dict[str, Any]) -> tuple[str, MessageUsage] | None:
    """(message.id, model and usage) of an assistant entry that carries usage."""
    if entry.get("type") != "assistant":
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return None
    message_id, usage, model = message.get("id"), message.get("usage"), message.get("model")
    if not isinstance(message_id, str) or not message_id or not isinstance(usage, dict):
        return None
    return message_id, MessageUsage(
        model if isinstance(model, str) else "",
        Usage(
            _int(usage.get("input_tokens")),
            _int(usage.get("output_tokens")),
            _int(usage.get("cache_creation_input_tokens")),
            _int(usage.get("cache_read_input_tokens")),
        ),
    )


def subagent_links(entry: dict[str, Any]) -> dict[str, str]:
    """tool_use id -> sub-agent session id, from a tool result that names its agent."""
    result = entry.get("toolUseResult")
    if not isinstance(result, dict):
        return {}
    agent = result.get("agentId")
    if not isinstance(agent, str) or not agent:
        return {}
    session_id = AGENT_PREFIX + agent
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    links: dict[str, str] = {}
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                tool_use_id = block.get("tool_use_id")
                if isinstance(tool_use_id, str) and tool_use_id:
                    links[tool_use_id] = session_id
    return links


def add_entry(
    delta: IndexDelta, entry: dict[str, Any] | None, entry_type: str, photos: int, timestamp: str
) -> None:
    """Count one entry into a delta (entry: the parsed stripped line, None for a stub).

    Every name kept goes through `indexable` (scrollback.contract.text).
    """
    entry_type = indexable(entry_type)
    delta.entry_counts[entry_type] = delta.entry_counts.get(entry_type, 0) + 1
    delta.photos += photos
    moment = timestamp_us(timestamp)
    delta.first_time_us = _min(delta.first_time_us, moment)
    delta.last_time_us = _max(delta.last_time_us, moment)
    if entry is None:
        return
    found = message_usage(entry)
    if found is not None:
        message_id, usage = indexable(found[0]), found[1]
        usage = MessageUsage(indexable(usage.model), usage.usage)
        seen = delta.messages.get(message_id)
        delta.messages[message_id] = usage if seen is None else seen.merge(usage)
    delta.links.update(
        (indexable(tool), indexable(agent)) for tool, agent in subagent_links(entry).items()
    )


@dataclass(slots=True)
class RolloutUsage:
    """A rollout's running usage state: the current model and the last cumulative total."""

    model: str = ""
    total: Usage = Usage()
    offset: int = 0  # how far the rollout was read into this state
    segment: int = 0  # how many times the cumulative count started over


def _cumulative(info: object) -> Usage | None:
    """`info.total_token_usage` of a token_count, in our fields; None when absent."""
    if not isinstance(info, dict):
        return None
    total = info.get("total_token_usage")
    if not isinstance(total, dict):
        return None
    inp, cached = _int(total.get("input_tokens")), _int(total.get("cached_input_tokens"))
    return Usage(max(0, inp - cached), _int(total.get("output_tokens")), 0, min(cached, inp))


def add_rollout_entry(delta: IndexDelta, entry: dict[str, Any], state: RolloutUsage) -> None:
    """Count a rollout line's usage (token_count) and model switch (turn_context)."""
    kind, payload = entry.get("type"), entry.get("payload")
    if not isinstance(payload, dict):
        return
    if kind == "turn_context":
        model = payload.get("model")
        if isinstance(model, str) and model:
            state.model = indexable(model)
        return
    if kind != "event_msg" or payload.get("type") != "token_count":
        return
    total = _cumulative(payload.get("info"))
    if total is None:
        return
    last = state.total
    if total == last:
        return  # the same count written again
    if total.input < last.input or total.output < last.output or total.cache_read < last.cache_read:
        last = Usage()  # the count started over (a resumed session): all of it is new
        state.segment += 1
    grown = Usage(
        total.input - last.input, total.output - last.output, 0, total.cache_read - last.cache_read
    )
    # A later segment may reach a total an earlier one reached: its rows are its own.
    segment = f"s{state.segment}:" if state.segment else ""
    key = f"codex:{segment}{total.input}:{total.cache_read}:{total.output}"
    seen = delta.messages.get(key)
    usage = MessageUsage(state.model, grown)
    delta.messages[key] = usage if seen is None else seen.merge(usage)
    state.total = total


class InsightIndex:
    """Brings the insight index of a transcript up to date, and reads it."""

    def __init__(self, root: TranscriptSource, store: InsightStore, *, max_line_size: int) -> None:
        self._root = root
        self._store = store
        self._max_line_size = max_line_size
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._waiting: dict[tuple[str, str], int] = {}  # refreshes waiting for a file's lock
        # Per rollout, its running usage state where its index stands (see RolloutUsage).
        self._rollouts: dict[tuple[str, str], RolloutUsage] = {}
        self.lines_read = 0  # lines parsed, for tests and benchmarks
        self.batch_lines = BATCH_LINES

    def _lock_for(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            if len(self._locks) > 10_000:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            return self._locks.setdefault(key, threading.Lock())

    def refresh(self, transcript: TranscriptFile) -> Insight:
        """Index what the file gained since last time (all of it if rewritten); the totals."""
        key = (transcript.project_dir, transcript.unique_id)
        lock = self._lock_for(key)
        if not lock.acquire(blocking=False):
            # Held by an indexing pass's feed, maybe: it hands over at its next batch.
            with self._locks_guard:
                self._waiting[key] = self._waiting.get(key, 0) + 1
            try:
                lock.acquire()
            finally:
                with self._locks_guard:
                    self._waiting[key] -= 1
                    if not self._waiting[key]:
                        del self._waiting[key]

        def catch_up(handle: ByteSource) -> None:
            for _ in range(3):  # another replica may move the state under us
                if self._catch_up(handle, key, transcript.source == CODEX):
                    break

        try:
            # The version listed (no HEAD for a bucket): what the listing shows beside it.
            self._root.read_listed(transcript, catch_up)
        finally:
            lock.release()
        return self._store.insight(*key) or Insight()

    def _wanted(self, key: tuple[str, str]) -> bool:
        """True while a refresh waits for this file's lock."""
        with self._locks_guard:
            return key in self._waiting

    def _catch_up(self, fd: ByteSource, key: tuple[str, str], rollout: bool = False) -> bool:
        feed = self.feed(fd, key, rollout)
        if feed is None:
            return True
        for raw in iter_lines_forward(fd, feed.start, feed.size, self._max_line_size):
            served = None
            if not is_blank(raw):
                served = serve_line(
                    raw, MediaMode.DEFERRED, INSIGHT_INLINE_LIMIT, self._max_line_size
                )
            line = None if served is None else served.stripped
            entry = None if line is None or line.oversize else parse_json_object(line.json)
            if not feed.line(raw, line, entry):
                break
        return feed.finish()

    def try_feed(
        self, fd: ByteSource, key: tuple[str, str], rollout: bool = False
    ) -> InsightFeed | None:
        """`feed` for a reader of the whole file (the indexing pass), holding the file's lock
        until the feed's `release`; None when up to date, or when a refresh holds the lock
        (it reads the file itself). A refresh meanwhile waits, then finds it up to date.
        """
        lock = self._lock_for(key)
        if not lock.acquire(blocking=False):
            return None
        try:
            feed = self.feed(fd, key, rollout)
        except BaseException:
            lock.release()
            raise
        if feed is None:
            lock.release()
        else:
            feed.lock = lock
        return feed

    def feed(
        self, fd: ByteSource, key: tuple[str, str], rollout: bool = False
    ) -> InsightFeed | None:
        """A feed to bring the index of the open file (a Codex rollout if `rollout`) up to
        date; None if it is.

        The caller hands it the lines from `InsightFeed.start` to `InsightFeed.size`.
        """
        base = self._store.state(*key)
        reset = False
        offset = 0
        identity = FileIdentity.of(fd, self._root.version)
        if base is not None:
            try:
                identity = base.identity.check(fd, 0, self._root.version)
                # The index ends after a newline, or after a complete unterminated
                # last line (a closing brace): anything else there is a rewrite.
                if base.offset and LineFile(fd).read(1, base.offset - 1) not in (NEWLINE, b"}"):
                    raise FileRewrittenError()
                offset = base.offset
            except FileRewrittenError:
                reset = True
        if base is not None and not reset and offset >= identity.size:
            return None
        state: RolloutUsage | None = None
        if rollout:
            state = self._rollouts.get(key)
            if state is None or state.offset != offset or reset:
                # No running state for where the index stands: read it all again.
                state, offset = RolloutUsage(), 0
                reset = base is not None
            self._rollouts[key] = state
        return InsightFeed(self, key, base, reset, identity, offset, state)

    def _count(
        self,
        delta: IndexDelta,
        line: StrippedLine,
        entry: dict[str, Any] | None,
        rollout: RolloutUsage | None,
    ) -> None:
        self.lines_read += 1
        if rollout is None:
            add_entry(delta, entry, line.type, line.image_count, line.timestamp)
            return
        photos = line.image_count if line.type == "response_item" else 0
        add_entry(delta, None, line.type, photos, line.timestamp)
        if entry is not None:
            add_rollout_entry(delta, entry, rollout)

    def _applied(
        self,
        key: tuple[str, str],
        base: IndexState | None,
        reset: bool,
        delta: IndexDelta,
        moved: IndexState,
        rollout: RolloutUsage | None,
    ) -> bool:
        """Apply a delta; a rollout's running state follows the index, or is dropped."""
        if not self._store.apply(*key, base, reset, delta, moved):
            self._rollouts.pop(key, None)
            return False
        if rollout is not None:
            rollout.offset = moved.offset
        return True

    def links(self, transcript: TranscriptFile) -> dict[str, str]:
        """The sub-agent links the index knows for a parent transcript (no refresh)."""
        return self._store.links(transcript.project_dir, transcript.unique_id)

    def parent_of(self, transcript: TranscriptFile) -> tuple[str, str] | None:
        """(parent session id, tool_use id) of a sub-agent, as the index knows it."""
        return self._store.parent_of(transcript.project_dir, transcript.unique_id)


class InsightFeed:
    """Counts a file's lines into its insight index as a caller reads them.

    The caller strips each line (payloads cut at INSIGHT_INLINE_LIMIT) and
    parses it once, then hands both here (`line`), so one read of the file can
    feed other indexes too. Changes are written in batches, each a
    compare-and-set on the stored state.
    """

    def __init__(
        self,
        index: InsightIndex,
        key: tuple[str, str],
        base: IndexState | None,
        reset: bool,
        identity: FileIdentity,
        offset: int,
        rollout: RolloutUsage | None = None,
    ) -> None:
        self._index = index
        self._rollout = rollout
        self._key = key
        self._current = base
        self._reset = reset
        self._identity = identity
        self._offset = offset
        self._delta = IndexDelta()
        self.start = offset
        self.size = identity.size
        self.active = True
        self.lock: threading.Lock | None = None  # held for the feed (`try_feed`)

    def release(self) -> None:
        """Let go of the file's lock, if the feed holds it (again: nothing)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def line(self, raw: RawLine, line: StrippedLine | None, entry: dict[str, Any] | None) -> bool:
        """Count one line (`line` None: blank or not a JSON object); False once done."""
        if not self.active or raw.start < self._offset:
            return self.active
        if raw.start >= self.size:
            return False
        if not raw.terminated:
            # The last line counts once it is a complete object (docs/contract.md §1:
            # no prefix of a line is one); a half-written line waits.
            if line is not None:
                self._index._count(self._delta, line, entry, self._rollout)
                self._offset = raw.end
            return False
        if line is not None:
            self._index._count(self._delta, line, entry, self._rollout)
        delta = self._delta
        delta.lines += 1
        delta.bytes += raw.next_start - raw.start
        self._offset = raw.next_start
        if delta.lines >= self._index.batch_lines or delta.bytes >= BATCH_BYTES:
            state = IndexState.at(self._identity, self._offset)
            if not self._index._applied(
                self._key, self._current, self._reset, delta, state, self._rollout
            ):
                self.active = False
                return False
            self._current, self._reset, self._delta = state, False, IndexDelta()
            if self.lock is not None and self._index._wanted(self._key):
                # A GetSession waits: it goes on from here itself, not after the whole pass.
                self.active = False
                self.release()
                return False
        return True

    def finish(self) -> bool:
        """Write what is left; False if another indexer moved the state first (or it handed
        the file over to a refresh)."""
        if not self.active:
            return False
        current = self._current
        if current is not None and not self._reset and self._offset == current.offset:
            return True  # no new complete line: nothing to write
        state = IndexState.at(self._identity, self._offset)
        return self._index._applied(
            self._key, current, self._reset, self._delta, state, self._rollout
        )


@dataclass(frozen=True, slots=True)
class SessionDetail:
    """A session's insight, its sub-agents' totals and its place in a sub-agent tree."""

    insight: Insight | None
    subagent_insight: Insight | None
    subagent_count: int
    parent_session_id: str
    parent_tool_use_id: str


def subagents_of(
    transcript: TranscriptFile, files: Iterable[TranscriptFile], links: dict[str, str]
) -> list[TranscriptFile]:
    """The sub-agent transcripts of a session: in its `subagents` dir, or linked from its calls."""
    linked = set(links.values())
    return [
        f
        for f in files
        if (f.project_dir, f.source) == (transcript.project_dir, transcript.source)
        and f.is_subagent
        and f.session_id != transcript.session_id
        and (
            f.parent_session_id == transcript.session_id
            or (not f.parent_session_id and f.session_id in linked)
        )
    ]
