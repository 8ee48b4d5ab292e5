"""The text people read in one transcript entry: what the search index holds.

The entry has been through the stripper first (payloads cut at the smallest
inline limit), so only its small remainder is parsed. From it we take message
text, thinking, tool inputs (their string values, not their keys) and tool
results as text, and summaries; never the JSON envelope (keys, ids, usage),
never an image block, and never a string that looks like a base64 payload
even when it was too short for the stripper to cut: one long run, or a run of
lines as MIME and PEM wrap base64 (full lines of 60 characters or more, then
a last line that is padded or too long to be a word).

Each source has one function that picks its text: `_claude_code_texts` for
Claude Code entries, `_rollout_texts` for Codex rollout lines (a `payload`
object, no `message`): message text, reasoning summaries (never
`encrypted_content`), tool calls (name and argument values) and their
outputs, and a compaction's summary. The `event_msg` copies of messages and
a compaction's replacement history repeat what their `response_item` lines
already hold, and are not indexed again. `_opencode_texts` for opencode
messages (type "opencode"): text and reasoning parts, tool parts (name,
input values, title, output, error; never attachments), subtasks' prompts and
file parts' names. `_gemini_texts` for Gemini CLI
messages: the text of `content` (a string, or its parts' `text`), each
thought's subject and description, and each tool call's name and the string
values of its args; never an `inlineData` part, a function response or a
tool call's result.

An entry is a prompt (`EntryText.prompt`) when a person wrote it to start or
steer the work, or it names the work: a user message that is not a tool's
result, a summary, a compaction's summary. Relevance weighs its words above
the same words in tool output.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from scrollback.contract.enumeration import is_gemini_message, is_rollout_entry
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER
from scrollback.contract.stripping import StrippedLine
from scrollback.opencode.view import ENTRY_TYPE as OPENCODE_ENTRY

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
    prompt: bool = False


def entry_text(stripped: StrippedLine, parsed: dict[str, Any] | None = None) -> EntryText | None:
    """The searchable text of a stripped entry (`parsed`: its JSON, when the caller has
    parsed it already); None when it has none."""
    if stripped.oversize:
        return None
    entry: Any = parsed
    if entry is None:
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
    holder = entry.get("payload") if is_rollout_entry(entry) else entry.get("message")
    if entry.get("type") == OPENCODE_ENTRY and isinstance(holder, dict):
        holder = holder.get("message")
    role = holder.get("role") if isinstance(holder, dict) else None
    if is_gemini_message(entry):
        role = _GEMINI_ROLES.get(entry["type"], "")
    return EntryText(
        uuid=stripped.uuid,
        type=stripped.type,
        role=role if isinstance(role, str) else "",
        timestamp=stripped.timestamp,
        has_photos=stripped.image_count > 0,
        text=text,
        prompt=_is_prompt(entry, holder, role),
    )


def _is_prompt(entry: dict[str, Any], holder: Any, role: Any) -> bool:
    """Whether the entry is a prompt or a title (see the module docstring)."""
    if isinstance(entry.get("summary"), str) or entry.get("type") in ("summary", "compacted"):
        return True
    if role != "user" or not isinstance(holder, dict):
        return False
    content = holder.get("content")
    if isinstance(content, list):
        return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return True


def _payload_lines(match: re.Match[str]) -> str:
    run = match.group()
    if _HEX.issuperset(run) and not _DIGITS.isdisjoint(run) and not _HEX_LETTERS.isdisjoint(run):
        return run
    return " "


def _clean(text: str) -> str:
    text = _BASE64_LINES.sub(_payload_lines, text.replace(_MARKER, " "))
    return _BASE64_RUN.sub(" ", text).strip()


def _texts(entry: dict[str, Any]) -> Iterator[str]:
    if entry.get("type") == OPENCODE_ENTRY and is_rollout_entry(entry):
        return _opencode_texts(entry)
    if is_rollout_entry(entry):
        return _rollout_texts(entry)
    if is_gemini_message(entry):
        return _gemini_texts(entry)
    return _claude_code_texts(entry)


def _opencode_texts(entry: dict[str, Any]) -> Iterator[str]:
    """An opencode message's text (see the module docstring), part by part."""
    parts = entry["payload"].get("parts")
    if not isinstance(parts, list):
        return
    for part in parts:
        data = part.get("data") if isinstance(part, dict) else None
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind in ("text", "reasoning"):
            text = data.get("text")
            if isinstance(text, str):
                yield text
        elif kind == "tool":
            yield from _opencode_tool(data)
        elif kind == "subtask":
            yield from _strings([data.get("description"), data.get("prompt")])
        elif kind == "file":
            yield from _strings(data.get("filename"))


def _opencode_tool(data: dict[str, Any]) -> Iterator[str]:
    """A tool part's name, input values, output and error (never its attachments)."""
    tool = data.get("tool")
    if isinstance(tool, str):
        yield tool
    state = data.get("state")
    if not isinstance(state, dict):
        return
    yield from _strings(state.get("input"))
    yield from _strings([state.get("title"), state.get("output"), state.get("error")])


# The roles of Gemini's message types, in the words the other sources use.
_GEMINI_ROLES = {"user": "user", "gemini": "assistant"}


def _gemini_texts(entry: dict[str, Any]) -> Iterator[str]:
    """A Gemini CLI message's text (see the module docstring)."""
    content = entry.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    for thought in entry.get("thoughts") or ():
        if isinstance(thought, dict):
            for key in ("subject", "description"):
                if isinstance(thought.get(key), str):
                    yield thought[key]
    for call in entry.get("toolCalls") or ():
        if isinstance(call, dict):
            if isinstance(call.get("name"), str):
                yield call["name"]
            yield from _strings(call.get("args"))


# Rollout items whose text people read, by the payload's own "type".
_ROLLOUT_MESSAGE_TEXT = frozenset({"input_text", "output_text", "text", "summary_text"})


def _rollout_texts(entry: dict[str, Any]) -> Iterator[str]:
    """A Codex rollout line's text (see the module docstring)."""
    payload = entry["payload"]
    kind = entry.get("type")
    if kind == "compacted":
        message = payload.get("message")
        if isinstance(message, str):
            yield message
        return
    if kind != "response_item":
        return
    item = payload.get("type")
    if item == "message":
        yield from _rollout_items(payload.get("content"))
    elif item == "reasoning":
        yield from _rollout_items(payload.get("summary"))
    elif item in ("function_call", "custom_tool_call"):
        name = payload.get("name")
        if isinstance(name, str):
            yield name
        yield from _argument_strings(payload.get("arguments"))
        yield from _argument_strings(payload.get("input"))
    elif item in ("function_call_output", "custom_tool_call_output"):
        output = payload.get("output")
        if isinstance(output, str):
            # Often JSON itself ({"output": ..., "metadata": ...}): its string values.
            yield from _argument_strings(output)
        else:
            yield from _rollout_items(output)
    elif item == "local_shell_call":
        yield from _strings(payload.get("action"))


def _rollout_items(items: Any) -> Iterator[str]:
    """The text of content items (input_text, output_text, summary_text); never an image."""
    if not isinstance(items, list):
        return
    for item in items:
        if isinstance(item, dict) and item.get("type") in _ROLLOUT_MESSAGE_TEXT:
            text = item.get("text")
            if isinstance(text, str):
                yield text


def _argument_strings(arguments: Any) -> Iterator[str]:
    """A tool call's arguments (or output): the string values of its JSON, or the text as it is."""
    if not isinstance(arguments, str):
        return
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        yield arguments
        return
    yield from _strings(parsed)


def _claude_code_texts(entry: dict[str, Any]) -> Iterator[str]:
    """A Claude Code entry's text (see the module docstring)."""
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
