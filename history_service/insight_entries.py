"""What one entry adds to a transcript's insight (history_service.insight_model.IndexDelta).

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

Sub-agent links come from the parent's tool result: a `user` entry whose
`toolUseResult` names an `agentId` and whose content holds the `tool_result`
of the Task call (`tool_use_id`). The sub-agent transcript is
`agent-<agentId>.jsonl` (docs/contract.md §1 layout).

opencode messages (source "opencode", lines of type "opencode") count the
`tokens` of each assistant message once, keyed by its id: input, output with
reasoning, cache write and read; its model is the message's `modelID` (its
`cost` is not kept).

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

Gemini CLI sessions (source "gemini") are read as their live messages
(scrollback.gemini_live); a `gemini` message's `tokens` count under its `id`
(a message rewritten while it streams counts once, the field-wise maximum as
for Claude Code), in our fields: input = `input` less `cached` (Gemini's
prompt count includes the cached part), cache_read = `cached`, output =
`output` plus `thoughts` (thinking is billed as output, as Codex's reasoning
is counted in its output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from history_service.insight_model import IndexDelta, MessageUsage, Usage, earlier, later
from scrollback.contract.enumeration import is_gemini_message
from scrollback.contract.text import indexable
from scrollback.opencode.view import ENTRY_TYPE as OPENCODE_ENTRY

AGENT_PREFIX = "agent-"


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


def _opencode_usage(entry: dict[str, Any]) -> tuple[str, MessageUsage] | None:
    """(message id, model and usage) of an opencode assistant message (its `tokens`)."""
    payload = entry.get("payload")
    message = payload.get("message") if isinstance(payload, dict) else None
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    message_id, tokens, model = entry.get("uuid"), message.get("tokens"), message.get("modelID")
    if not isinstance(message_id, str) or not message_id or not isinstance(tokens, dict):
        return None
    cache = tokens.get("cache")
    cache = cache if isinstance(cache, dict) else {}
    return message_id, MessageUsage(
        model if isinstance(model, str) else "",
        Usage(
            _int(tokens.get("input")),
            _int(tokens.get("output")) + _int(tokens.get("reasoning")),
            _int(cache.get("write")),
            _int(cache.get("read")),
        ),
    )


def gemini_usage(entry: dict[str, Any]) -> tuple[str, MessageUsage] | None:
    """(id, model and usage) of a Gemini CLI `gemini` message that carries `tokens`."""
    tokens, model = entry.get("tokens"), entry.get("model")
    if not isinstance(tokens, dict) or not is_gemini_message(entry):
        return None
    inp, cached = _int(tokens.get("input")), _int(tokens.get("cached"))
    return entry["id"], MessageUsage(
        model if isinstance(model, str) else "",
        Usage(
            max(0, inp - cached),
            _int(tokens.get("output")) + _int(tokens.get("thoughts")),
            0,
            min(cached, inp),
        ),
    )


def message_usage(entry: dict[str, Any]) -> tuple[str, MessageUsage] | None:
    """(message.id, model and usage) of an assistant entry that carries usage."""
    if entry.get("type") == OPENCODE_ENTRY:
        return _opencode_usage(entry)
    if entry.get("type") == "gemini":
        return gemini_usage(entry)
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
    delta.first_time_us = earlier(delta.first_time_us, moment)
    delta.last_time_us = later(delta.last_time_us, moment)
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
    total: Usage = field(default_factory=Usage)
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
