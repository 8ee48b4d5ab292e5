"""The text people read in one transcript entry: what the search index holds.

The entry has been through the stripper first (payloads cut at the smallest
inline limit), so only its small remainder is parsed. From it we take message
text, thinking, tool inputs (their string values, not their keys) and tool
results as text, and summaries; never the JSON envelope (keys, ids, usage),
never an image block, and never a string that looks like a base64 payload
even when it was too short for the stripper to cut: one long run, or a run of
lines as MIME and PEM wrap base64 (full lines of 60 characters or more, then
a last line that is padded or too long to be a word).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from scrollback.contract.marker import STRIPPED_MEDIA_MARKER
from scrollback.contract.stripping import StrippedLine

# Text kept per entry: a huge tool result is searchable by its first part.
MAX_TEXT_CHARS = 64 * 1024
# A run of base64 alphabet this long with no space is a payload, not prose.
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{200,}")
# A full line of wrapped base64 (MIME writes 76 characters, PEM 64), and the
# shorter last line: padded, or too long to be a word.
_FULL_LINE = r"[ \t]*+[A-Za-z0-9+/]{60,}+={0,2}[ \t]*+\r?"
_LAST_LINE = r"[ \t]*+(?:[A-Za-z0-9+/]{16,}+={0,2}|[A-Za-z0-9+/]++={1,2})[ \t]*+\r?"
_BASE64_LINES = re.compile(rf"(?m)^{_FULL_LINE}(?:\n{_FULL_LINE})*\n{_LAST_LINE}(?=\n|\Z)")
# Lines of hex digits, letters and digits both, are hashes or dumps people search for.
_HEX = frozenset("0123456789abcdefABCDEF \t\r\n")
_DIGITS = frozenset("0123456789")
_HEX_LETTERS = frozenset("abcdefABCDEF")
_MARKER = STRIPPED_MEDIA_MARKER
_MEDIA_BLOCKS = frozenset({"image", "document"})


@dataclass(frozen=True, slots=True)
class EntryText:
    """What the index keeps of one entry besides its place in the file."""

    uuid: str
    type: str
    role: str
    timestamp: str
    has_photos: bool
    text: str


def entry_text(stripped: StrippedLine) -> EntryText | None:
    """The searchable text of a stripped entry; None when it has none."""
    if stripped.oversize:
        return None
    try:
        entry = orjson.loads(stripped.json)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(entry, dict):
        return None
    parts: list[str] = []
    size = 0
    for part in _texts(entry):
        part = _clean(part)
        if not part:
            continue
        parts.append(part)
        size += len(part) + 1
        if size >= MAX_TEXT_CHARS:
            break
    text = "\n".join(parts)[:MAX_TEXT_CHARS]
    if not text.strip():
        return None
    message = entry.get("message")
    role = message.get("role") if isinstance(message, dict) else None
    return EntryText(
        uuid=stripped.uuid,
        type=stripped.type,
        role=role if isinstance(role, str) else "",
        timestamp=stripped.timestamp,
        has_photos=stripped.image_count > 0,
        text=text,
    )


def _payload_lines(match: re.Match[str]) -> str:
    run = match.group()
    if _HEX.issuperset(run) and not _DIGITS.isdisjoint(run) and not _HEX_LETTERS.isdisjoint(run):
        return run
    return " "


def _clean(text: str) -> str:
    text = _BASE64_LINES.sub(_payload_lines, text.replace(_MARKER, " "))
    return _BASE64_RUN.sub(" ", text).strip()


def _texts(entry: dict[str, Any]) -> Iterator[str]:
    summary = entry.get("summary")
    if isinstance(summary, str):
        yield summary
    content = entry.get("content")  # system entries
    if isinstance(content, str):
        yield content
    message = entry.get("message")
    if isinstance(message, dict):
        yield from _content(message.get("content"))


def _content(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in _MEDIA_BLOCKS:
            continue
        if kind == "text" and isinstance(block.get("text"), str):
            yield block["text"]
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            yield block["thinking"]
        elif kind == "tool_use":
            name = block.get("name")
            if isinstance(name, str):
                yield name
            yield from _strings(block.get("input"))
        elif kind == "tool_result":
            yield from _content(block.get("content"))


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """The string values inside a tool input (keys are envelope, not text)."""
    if depth > 16:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, depth + 1)
