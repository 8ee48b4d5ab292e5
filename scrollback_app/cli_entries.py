"""How the CLI shows one entry in a line: `scrollback window`'s table and `scrollback tail`.

A Claude Code entry reads as its text with [image], [tool_use NAME], [tool_result] labels. A
Codex rollout line reads the same way: its type column says who speaks (user, assistant),
a tool call shows what it runs rather than its JSON arguments, a tool output its text, and
the event lines that repeat a response item (messages, reasoning, token counts) are not
shown at all, so each message appears once.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from scrollback.contract.enumeration import is_gemini_message, is_rollout_entry
from scrollback.contract.refs import OPENCODE as OPENCODE_ENTRY
from scrollback.history.v1 import history_pb2 as hpb
from scrollback_app.entry_notes import system_note


def _parsed(entry: hpb.Entry) -> dict[str, Any]:
    try:
        value = orjson.loads(entry.json)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and lone ESC pairs:
# tool output in transcripts carries them, and no viewer here interprets them.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """The text without terminal escape sequences."""
    return _ANSI.sub("", text)


def _block_parts(blocks: list[Any], parts: list[str]) -> None:
    """Labels and texts of content blocks: [image], [tool_use NAME], [tool_result] TEXT."""
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "image":
            parts.append("[image]")
        elif kind == "tool_use":
            parts.append(f"[tool_use {block.get('name', '')}]")
            tool_input = block.get("input")
            if isinstance(tool_input, dict):
                # The first string argument says most (a command, a path, a pattern).
                first = next((v for v in tool_input.values() if isinstance(v, str)), "")
                parts.append(first)
        elif kind == "tool_result":
            parts.append("[tool_result error]" if block.get("is_error") else "[tool_result]")
            inner = block.get("content")
            _block_parts(inner if isinstance(inner, list) else [inner], parts)
        elif kind == "thinking":
            parts.append("[thinking]")
        elif isinstance(kind, str):
            parts.append(f"[{kind}]")


# Codex writes each message, its reasoning and its token counts twice: as a response item
# and as an event_msg for its own UI. The events carry nothing the items do not.
_TWIN_EVENTS = frozenset(
    {
        "token_count",
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "agent_reasoning_section_break",
    }
)
# A shell run as `bash -lc SCRIPT`: the script is what the agent wrote.
_SHELLS = frozenset({"bash", "sh", "zsh"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.MULTILINE)


def shown(entry: hpb.Entry) -> bool:
    """Whether a table or `tail` shows the entry: not a Codex event that repeats a response
    item (a message, its reasoning, a token count), nor a turn's settings."""
    if entry.type not in ("event_msg", "turn_context"):
        return True
    parsed = _parsed(entry)
    payload = parsed.get("payload")
    if not is_rollout_entry(parsed) or not isinstance(payload, dict):
        return True
    return entry.type == "event_msg" and payload.get("type") not in _TWIN_EVENTS


def shown_type(entry: hpb.Entry) -> str:
    """The type column: a Codex line by who speaks in it, as Claude Code's lines are typed."""
    if entry.type not in ("response_item", "event_msg", "compacted", "session_meta"):
        return entry.type
    parsed = _parsed(entry)
    payload = parsed.get("payload")
    if not is_rollout_entry(parsed) or not isinstance(payload, dict):
        return entry.type
    item = payload.get("type")
    if entry.type == "response_item" and item == "message":
        return str(payload.get("role") or "message")
    if entry.type == "response_item" and isinstance(item, str):
        return "user" if item.endswith("_output") else "assistant"
    return {"event_msg": "event", "compacted": "summary", "session_meta": "session"}[entry.type]


def _call_text(item: str, payload: dict[str, Any]) -> str:
    """What a Codex tool call does, in a few words: its shell script, the files a patch
    touches, else its first string argument (as a Claude Code tool_use reads)."""
    arguments = payload.get("arguments", payload.get("input"))
    if not isinstance(arguments, str):
        return ""
    if item == "custom_tool_call":
        files = _PATCH_FILE.findall(arguments)
        return ", ".join(files) if files else arguments.strip().split("\n", 1)[0]
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if not isinstance(parsed, dict):
        return arguments
    command = parsed.get("command")
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        if (
            len(command) >= 3
            and command[0].rsplit("/", 1)[-1] in _SHELLS
            and command[1]
            in (
                "-lc",
                "-c",
            )
        ):
            return str(command[2])
        return " ".join(command)
    return next((v for v in parsed.values() if isinstance(v, str)), "")


def _output_text(output: Any, parts: list[str]) -> None:
    """A tool output's text: Codex wraps a shell's in JSON with its exit code."""
    if isinstance(output, str):
        try:
            wrapped = orjson.loads(output)
        except orjson.JSONDecodeError:
            wrapped = None
        inner = wrapped.get("output") if isinstance(wrapped, dict) else None
        parts.append(inner if isinstance(inner, str) else output)
    elif isinstance(output, list):
        _content_parts(output, parts)


def _content_parts(blocks: list[Any], parts: list[str]) -> None:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        text = block.get("text")
        if isinstance(text, str):
            parts.append(text)
        elif block.get("type") in ("input_image", "image"):
            parts.append("[image]")
        else:
            parts.append(f"[{block.get('type', '')}]")


def _rollout_parts(payload: dict[str, Any], kind: str, parts: list[str]) -> None:
    """A Codex rollout line's text as Claude Code's reads: a message's text and [image]s,
    [thinking] and its summary, [tool_use NAME] and what the call does, [tool_result] and
    its output, [event KIND] and its message."""
    item = payload.get("type")
    if kind == "response_item" and item == "message":
        _content_parts(payload.get("content") or [], parts)
    elif kind == "response_item" and item == "reasoning":
        parts.append("[thinking]")
        for block in payload.get("summary") or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
    elif kind == "response_item" and isinstance(item, str) and item.endswith("_call"):
        parts.append(f"[tool_use {payload.get('name', '')}]".replace(" ]", "]"))
        parts.append(_call_text(item, payload))
    elif kind == "response_item" and isinstance(item, str) and item.endswith("_output"):
        parts.append("[tool_result]")
        _output_text(payload.get("output"), parts)
    elif kind == "event_msg":
        parts.append(f"[event {item}]")
        message = payload.get("message")
        parts.append(message if isinstance(message, str) else "")
    elif kind == "compacted":
        parts.append("[compacted]")
        message = payload.get("message")
        parts.append(message if isinstance(message, str) else "")
    elif kind == "session_meta":
        parts.append(f"[session_meta] {payload.get('cwd', '')}")
    elif kind == "turn_context":
        parts.append(f"[turn_context] {payload.get('model', '')}")
    else:
        parts.append(f"[{kind} {item or ''}]".replace(" ]", "]"))


def gemini_texts(content: Any) -> list[str]:
    """A Gemini Part list's (or string's) texts, an image part as [image]."""
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        elif "inlineData" in part:
            texts.append("[image]")
    return texts


def _gemini_parts(parsed: dict[str, Any], parts: list[str]) -> None:
    """A Gemini CLI message's labels and texts: [thinking] subjects, text and [image], each
    tool call as [tool NAME] and its first string argument."""
    thoughts = [t for t in parsed.get("thoughts") or () if isinstance(t, dict)]
    if thoughts:
        parts.append("[thinking]")
        parts += [str(t.get("subject", "")) for t in thoughts]
    parts += gemini_texts(parsed.get("content"))
    for call in parsed.get("toolCalls") or ():
        if isinstance(call, dict):
            parts.append(f"[tool {call.get('name', '')}]")
            args = call.get("args")
            values = args.values() if isinstance(args, dict) else ()
            parts.append(next((v for v in values if isinstance(v, str)), ""))


def _opencode_parts(payload: dict[str, Any], parts: list[str]) -> None:
    """An opencode message's labels and texts: [role] text, [reasoning] text, [tool NAME]
    output, [file NAME], [patch], [subtask] description; steps and snapshots left out."""
    message = payload.get("message")
    parts.append(f"[{message.get('role', '')}]" if isinstance(message, dict) else "[opencode]")
    for part in payload.get("parts") or []:
        data = part.get("data") if isinstance(part, dict) else None
        if not isinstance(data, dict):
            continue
        kind, text = data.get("type"), data.get("text")
        if kind == "text" and isinstance(text, str):
            parts.append(text)
        elif kind == "reasoning" and isinstance(text, str):
            parts += ["[reasoning]", text]
        elif kind == "tool":
            state = data.get("state")
            output = state.get("output", state.get("error")) if isinstance(state, dict) else None
            parts += [f"[tool {data.get('tool', '')}]", output if isinstance(output, str) else ""]
        elif kind == "file":
            parts.append(f"[file {data.get('filename') or data.get('mime') or ''}]")
        elif kind in ("patch", "compaction", "agent"):
            parts.append(f"[{kind}]")
        elif kind == "subtask":
            description = data.get("description")
            parts += ["[subtask]", description if isinstance(description, str) else ""]


def entry_text(entry: hpb.Entry, limit: int = 0) -> str:
    """A one-line summary of an entry's message: its text, with [image]/[tool_use]/... labels."""
    parsed = _parsed(entry)
    message = parsed.get("message")
    payload = parsed.get("payload")
    parts: list[str] = []
    if is_gemini_message(parsed):
        _gemini_parts(parsed, parts)
    elif message is None and isinstance(payload, dict) and entry.type == OPENCODE_ENTRY:
        _opencode_parts(payload, parts)
    elif message is None and isinstance(payload, dict):
        _rollout_parts(payload, entry.type, parts)
    elif entry.type == "summary":
        parts.append(str(parsed.get("summary", "")))
    elif entry.type == "system":
        parts.append(system_note(parsed))
    elif isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            _block_parts(content, parts)
    text = " ".join(strip_ansi(" ".join(p for p in parts if p)).split())
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def photo_marker(entry: hpb.Entry) -> str:
    """`[N photo(s)]` for an entry with media refs, else ""."""
    count = len(entry.media_refs)
    if not count:
        return ""
    return f"[{count} photo{'s' if count > 1 else ''}]"
