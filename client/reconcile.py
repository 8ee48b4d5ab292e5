"""`reconcile_pending`: the one comparison of accepted messages with transcript entries (docs/contract.md §7).

Bootstrap and WatchSession hand a client two records of a sent message: the
*pending* AcceptedMessage (what the server accepted and still owes) and, once
the agent wrote it, the transcript *entry*. The server never compares them;
this function is the single place that does.

The rule, precisely. A pending message P is retired by a transcript entry E
when all of these hold:

1. E is a user message: `type == "user"`, its `message.role` is `"user"` (or
   absent), it is not `isMeta`, and its `message.content` is either a string or
   a list holding at least one `text`, `image` or `document` block (a list of
   only `tool_result` blocks is a tool answer, not a message someone sent);
2. E's text equals P's text, both with leading and trailing whitespace removed.
   E's text is `message.content` when that is a string, else its `text` blocks'
   texts joined with `"\\n"`, in order;
3. E carries as many attachments as P: the number of top-level `image` and
   `document` blocks of `message.content` equals `len(P.attachments)`;
4. E was written **after** P was accepted. That is known in two ways only:
   - E's `timestamp` parses (ISO 8601) and is strictly later than
     `P.accepted_time`; or
   - the caller passes `after_offset` and E's `byte_offset` is at or past it.
     Pass the `file_size_bytes` of the Bootstrap window that returned the
     pending messages (the server reads the pending list before the window,
     so every byte past the window's end was written after every acceptance
     in that header), or a watch's end of file for pending that were already
     known when that end was reached.
   An entry for which neither holds existed (or may have existed) before the
   acceptance and can NEVER retire it: the user who sent "hi" yesterday and
   sends "hi" again now keeps the new "hi" pending until a *new* "hi" entry
   appears.
5. Each entry retires at most one pending message, and each pending message is
   retired by at most one entry. Pending messages are matched oldest first (by
   `seq`); each takes, among the eligible entries not already used, the one
   eligible for the fewest later pending messages, the earliest in file order
   (`byte_offset`) among equals. Eligibility sets shrink with later
   acceptances, so this retires as many pending messages as any matching can.

Entries whose `json` is not a JSON object are never matches. The function is
pure: it reads its inputs and returns a `Reconciliation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from scrollback.history.v1 import history_pb2 as hpb

_ATTACHMENT_TYPES = frozenset({"image", "document"})
_MESSAGE_TYPES = frozenset({"text", "image", "document"})


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The outcome: still pending (oldest first) and (retired, retiring entry) pairs."""

    pending: list[hpb.AcceptedMessage]
    retired: list[tuple[hpb.AcceptedMessage, hpb.Entry]]


@dataclass(frozen=True, slots=True)
class _Candidate:
    entry: hpb.Entry
    text: str
    attachments: int
    time: datetime | None


def parse_timestamp(text: str) -> datetime | None:
    """An entry's ISO 8601 timestamp as an aware datetime (UTC if naive), or None."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def accepted_time_of(message: hpb.AcceptedMessage) -> datetime:
    """When a message was accepted, as an aware UTC datetime."""
    return message.accepted_time.ToDatetime(tzinfo=UTC)


def _candidate(entry: hpb.Entry) -> _Candidate | None:
    if entry.type != "user":
        return None
    try:
        parsed: Any = orjson.loads(entry.json)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or parsed.get("isMeta") is True:
        return None
    message = parsed.get("message")
    if not isinstance(message, dict) or message.get("role", "user") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        text, attachments = content, 0
    elif isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        if not any(b.get("type") in _MESSAGE_TYPES for b in blocks):
            return None
        text = "\n".join(
            b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        attachments = sum(1 for b in blocks if b.get("type") in _ATTACHMENT_TYPES)
    else:
        return None
    return _Candidate(entry, text.strip(), attachments, parse_timestamp(entry.timestamp))


def _after(candidate: _Candidate, accepted: datetime, after_offset: int | None) -> bool:
    if after_offset is not None and candidate.entry.byte_offset >= after_offset:
        return True
    return candidate.time is not None and candidate.time > accepted


def reconcile_pending(
    entries: Sequence[hpb.Entry],
    pending: Sequence[hpb.AcceptedMessage],
    *,
    after_offset: int | None = None,
) -> Reconciliation:
    """Retire the pending messages that entries written after their acceptance carry.

    See the module docstring for the exact rule. `entries` may come from any
    mix of windows and watch events (they are ordered by byte offset here);
    `after_offset` is the byte offset from which every entry is known to have
    been written after every given pending was accepted (None: rely on
    timestamps only).
    """
    candidates = sorted(
        (c for c in map(_candidate, entries) if c is not None),
        key=lambda c: c.entry.byte_offset,
    )
    used: set[int] = set()
    still: list[hpb.AcceptedMessage] = []
    retired: list[tuple[hpb.AcceptedMessage, hpb.Entry]] = []
    ordered = sorted(pending, key=lambda m: m.seq)
    keys = [(m.text.strip(), len(m.attachments), accepted_time_of(m)) for m in ordered]
    for position, message in enumerate(ordered):
        text, count, accepted = keys[position]
        eligible = [
            number
            for number, candidate in enumerate(candidates)
            if number not in used
            and candidate.text == text
            and candidate.attachments == count
            and _after(candidate, accepted, after_offset)
        ]
        if not eligible:
            still.append(message)
            continue

        later = keys[position + 1 :]

        def later_uses(number: int, later: list[tuple[str, int, datetime]] = later) -> int:
            candidate = candidates[number]
            return sum(
                1
                for later_text, later_count, later_time in later
                if later_text == candidate.text
                and later_count == candidate.attachments
                and _after(candidate, later_time, after_offset)
            )

        chosen = min(eligible, key=lambda n: (later_uses(n), candidates[n].entry.byte_offset))
        used.add(chosen)
        retired.append((message, candidates[chosen].entry))
    return Reconciliation(still, retired)
