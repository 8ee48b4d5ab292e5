"""Generated Gemini CLI sessions, written as gemini-cli's ChatRecordingService writes them.

The writer follows packages/core/src/services/chatRecordingService.ts: each
record is `JSON.stringify(record) + "\\n"` appended to the file (compact JSON,
members in the order the object was built); the first line is the header
(`sessionId`, `projectHash`, `startTime`, `lastUpdated`, `kind`, `directories`);
`recordMessage` appends the message then `{"$set": {"lastUpdated": ...}}`;
tokens and tool calls rewrite the last gemini message (the same id appended
again); `saveSummary` is a `$set` of `summary`; `updateMessagesFromHistory` a
`$set` of `messages` and `lastUpdated` (a checkpoint); `rewindTo` appends
`{"$rewindTo": id}`. Sub-agents are written under `chats/<parent id>/<id>.jsonl`.

`GeminiSession` also keeps the session as gemini-cli's reader sees it (a map
from id to the latest version, in first-set order): `live()` is what a reader
of the session must serve, each message with its decoded images in
enumeration order.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.support.media import png_bytes

PROJECT_ROOT = "/home/dev/gemini-project"
MODEL = "gemini-2.5-pro"


def inline_part(data: bytes, mime_type: str = "image/png") -> dict[str, Any]:
    """A Part holding inline data (base64), as @google/genai writes it."""
    return {"inlineData": {"mimeType": mime_type, "data": base64.b64encode(data).decode()}}


def stringify(record: Any) -> bytes:
    """JSON.stringify(record): compact, members in insertion order, non-ASCII as is."""
    return orjson.dumps(record)


@dataclass
class GeminiSession:
    """A session file being written, and the session as Gemini shows it now."""

    session_id: str
    kind: str = "main"
    lines: list[bytes] = field(default_factory=list)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    stamp: int = 0

    def __post_init__(self) -> None:
        header: dict[str, Any] = {
            "sessionId": self.session_id,
            "projectHash": hashlib.sha256(PROJECT_ROOT.encode()).hexdigest(),
            "startTime": self._time(),
            "lastUpdated": self._time(),
        }
        header["kind"] = self.kind
        if self.kind == "subagent":
            header["directories"] = [PROJECT_ROOT]
        self._append(header)

    def _time(self) -> str:
        self.stamp += 1
        return f"2026-03-01T10:{self.stamp // 60 % 60:02d}:{self.stamp % 60:02d}.000Z"

    def _append(self, record: Any) -> None:
        self.lines.append(stringify(record))

    def _push(self, message: dict[str, Any]) -> None:
        """pushMessage: the message appended, and set in the map (its first place kept)."""
        self._append(message)
        self.messages[message["id"]] = message

    def user(self, message_id: str, content: Any) -> dict[str, Any]:
        """recordMessage of a user message (content: a string or Part[])."""
        message = {"id": message_id, "timestamp": self._time(), "type": "user", "content": content}
        self._push(message)
        self.set_metadata(lastUpdated=self._time())
        return message

    def gemini(
        self, message_id: str, text: str, *, thoughts: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """recordMessage of a gemini message (its thoughts, no tokens yet, the model)."""
        message: dict[str, Any] = {
            "id": message_id,
            "timestamp": self._time(),
            "type": "gemini",
            "content": text,
            "thoughts": thoughts or [],
            "tokens": None,
            "model": MODEL,
        }
        self._push(message)
        self.set_metadata(lastUpdated=self._time())
        return message

    def tokens(self, message_id: str, inp: int, out: int, cached: int, thoughts: int) -> None:
        """recordMessageTokens: the last gemini message rewritten with its tokens."""
        message = dict(self.messages[message_id])
        message["tokens"] = {
            "input": inp,
            "output": out,
            "cached": cached,
            "thoughts": thoughts,
            "tool": 0,
            "total": inp + out + thoughts,
        }
        self._push(message)

    def stream(self, message_id: str, text: str) -> None:
        """The last gemini message rewritten with more text (the same id appended again)."""
        message = dict(self.messages[message_id])
        message["content"] = text
        self._push(message)

    def tool_call(self, message_id: str, call_id: str, name: str, args: Any, result: Any) -> None:
        """recordToolCalls onto the last gemini message: it is rewritten with the call."""
        message = dict(self.messages[message_id])
        calls = list(message.get("toolCalls") or [])
        calls.append(
            {
                "id": call_id,
                "name": name,
                "args": args,
                "result": result,
                "status": "success",
                "timestamp": self._time(),
                "displayName": name,
                "description": "",
                "renderOutputAsMarkdown": False,
            }
        )
        message["toolCalls"] = calls
        self._push(message)

    def set_metadata(self, **updates: Any) -> None:
        """updateMetadata: a `$set` line (a `messages` list is a checkpoint)."""
        self._append({"$set": updates})
        if "messages" in updates:
            self.messages = {}
            for message in updates["messages"]:
                self.messages[message["id"]] = message

    def checkpoint(self, messages: list[dict[str, Any]]) -> None:
        """updateMessagesFromHistory: the messages replaced by `messages` (a checkpoint)."""
        self.set_metadata(messages=messages, lastUpdated=self._time())

    def rewind(self, message_id: str) -> None:
        """rewindTo: that message and every later one dropped."""
        ids = list(self.messages)
        if message_id not in self.messages:
            return  # gemini-cli writes no record when the id is not there
        for dropped in ids[ids.index(message_id) :]:
            del self.messages[dropped]
        self._append({"$rewindTo": message_id})

    def data(self, *, torn: bytes = b"") -> bytes:
        """The file's bytes: every record and its newline, then a torn last line if given."""
        return b"".join(line + b"\n" for line in self.lines) + torn

    def live(self) -> list[tuple[str, list[bytes]]]:
        """(id, decoded images in enumeration order) of every live message, in order."""
        return [(i, images_of(m)) for i, m in self.messages.items()]

    def file_name(self) -> str:
        """`session-<minute>-<first 8 of the id>.jsonl`, or `<id>.jsonl` for a sub-agent."""
        if self.kind == "subagent":
            return f"{self.session_id}.jsonl"
        return f"session-2026-03-01T10-00-{self.session_id[:8]}.jsonl"


def images_of(message: Any) -> list[bytes]:
    """The decoded image payloads of a message, in the contract's enumeration order."""
    found: list[bytes] = []
    stack: list[Any] = [message]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            inline = item.get("inlineData")
            if isinstance(inline, dict) and str(inline.get("mimeType", "")).startswith("image/"):
                found.append(base64.b64decode(inline["data"]))
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def full_session(session_id: str, *, seed: int = 0) -> GeminiSession:
    """A session with every element: images in a user message and in a function response,
    rewrites of one id, `$set` metadata, a checkpoint and a rewind."""
    session = GeminiSession(session_id)
    photo, chart, screen = (png_bytes(30_000, seed=seed + k) for k in (1, 2, 3))
    session.user("u1", [{"text": "what is in this photo?"}, inline_part(photo)])
    session.gemini("g1", "", thoughts=[{"subject": "Looking", "description": "a photo"}])
    session.stream("g1", "It is a photo of")
    session.stream("g1", "It is a photo of a cat.")
    session.tokens("g1", 1200, 40, 300, 25)
    session.user("u2", "draw a chart")
    session.gemini("g2", "Here is the chart.")
    session.tool_call(
        "g2",
        "call-1",
        "read_many_files",
        {"paths": ["chart.png"]},
        [
            {
                "functionResponse": {
                    "id": "call-1",
                    "name": "read_many_files",
                    "response": {"output": "read 1 file"},
                    "parts": [inline_part(chart)],
                }
            },
            inline_part(screen),
        ],
    )
    session.tokens("g2", 2000, 80, 0, 10)
    session.set_metadata(summary="Cat photo and a chart")
    session.user("u3", "never mind, start over")
    session.gemini("g3", "Sure.")
    session.rewind("u3")
    session.user("u4", "one more question")
    return session


def checkpointed_session(session_id: str, *, seed: int = 0) -> GeminiSession:
    """A session whose messages were replaced by a checkpoint, then one more turn."""
    session = full_session(session_id, seed=seed)
    kept = [session.messages["u1"], session.messages["g1"], session.messages["u4"]]
    masked = dict(session.messages["g2"], content="[chart output masked]")
    session.checkpoint([kept[0], kept[1], masked, kept[2]])
    session.gemini("g5", "Done.")
    return session


def write_session(
    home: Path,
    session: GeminiSession,
    *,
    slug: str = "gemini-project",
    parent: str = "",
    torn: bytes = b"",
    project_root: str | None = PROJECT_ROOT,
) -> Path:
    """Write a session under `<home>/tmp/<slug>/chats/` (a sub-agent under `<parent>/`)."""
    project = home / "tmp" / slug
    chats = project / "chats"
    directory = chats / parent if parent else chats
    directory.mkdir(parents=True, exist_ok=True)
    if project_root is not None:
        (project / ".project_root").write_text(project_root + "\n")
    path = directory / session.file_name()
    path.write_bytes(session.data(torn=torn))
    return path


def legacy_document(session: GeminiSession) -> bytes:
    """The session as the older whole-document `session-*.json` (JSON.stringify(record, null, 2))."""
    header = orjson.loads(session.lines[0])
    record = {
        "sessionId": header["sessionId"],
        "projectHash": header["projectHash"],
        "startTime": header["startTime"],
        "lastUpdated": header["lastUpdated"],
        "messages": list(session.messages.values()),
    }
    return orjson.dumps(record, option=orjson.OPT_INDENT_2)
