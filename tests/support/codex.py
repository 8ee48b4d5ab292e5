"""Generated Codex CLI rollouts: every element the second source serves, with what to expect.

A rollout (docs/contract.md §1) is one JSON object per line,
`{"timestamp", "type", "payload"}`, as Codex's recorder writes them (compact
serde JSON). `Rollout` builds one line by line and remembers what a reader
must find: the image bytes of each line in enumeration order (a user
message's `input_image`, the `images` of its `event_msg` copy, a
`function_call_output`'s content items, `compacted.replacement_history`),
the token usage, the text a search must find and the text it must never find.
`write_codex_tree` lays out `sessions/YYYY/MM/DD/` and `archived_sessions/`.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.support.media import png_bytes

CWD = "/home/dev/project-x"
MODEL = "gpt-5"


def data_url(data: bytes, media_type: str = "image/png") -> str:
    """A base64 data URL, as Codex writes every image."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image_item(data: bytes) -> dict[str, Any]:
    """A content item holding an image."""
    return {"type": "input_image", "image_url": data_url(data)}


@dataclass
class Rollout:
    """A rollout being written, and what each of its lines holds."""

    session_id: str
    lines: list[bytes] = field(default_factory=list)
    # Per line: the decoded images, in enumeration order (empty for most lines).
    images: list[list[bytes]] = field(default_factory=list)
    stamp: int = 0

    def add(self, kind: str, payload: Any, images: list[bytes] | None = None) -> bytes:
        """Append one line of that kind (its images in enumeration order)."""
        self.stamp += 1
        line = orjson.dumps(
            {
                "timestamp": f"2025-09-01T10:{self.stamp // 60:02d}:{self.stamp % 60:02d}.000Z",
                "type": kind,
                "payload": payload,
            }
        )
        self.lines.append(line)
        self.images.append(images or [])
        return line

    def raw(self, text: bytes) -> None:
        """Append a line as it stands (a torn or malformed one)."""
        self.lines.append(text)
        self.images.append([])

    def meta(self, cwd: str = CWD) -> None:
        self.add(
            "session_meta",
            {
                "id": self.session_id,
                "timestamp": "2025-09-01T10:00:00.000Z",
                "cwd": cwd,
                "originator": "codex_cli_rs",
                "cli_version": "0.30.0",
                "instructions": "You are Codex. " * 40,
                "git": {"branch": "main"},
            },
        )

    def turn_context(self, model: str = MODEL) -> None:
        self.add(
            "turn_context",
            {
                "cwd": CWD,
                "approval_policy": "on-request",
                "sandbox_policy": {"mode": "workspace-write"},
                "model": model,
                "summary": "auto",
            },
        )

    def user(self, text: str, images: list[bytes]) -> None:
        """A user message with images, then its event_msg copy (the same images again)."""
        content = [{"type": "input_text", "text": text}, *(image_item(i) for i in images)]
        self.add("response_item", {"type": "message", "role": "user", "content": content}, images)
        self.add(
            "event_msg",
            {"type": "user_message", "message": text, "images": [data_url(i) for i in images]},
            images,
        )

    def assistant(self, text: str) -> None:
        self.add(
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
        )

    def reasoning(self, summary: str, encrypted: str) -> None:
        self.add(
            "response_item",
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": summary}],
                "content": None,
                "encrypted_content": encrypted,
            },
        )

    def tool_call(self, call_id: str, command: str, output: str, images: list[bytes]) -> None:
        """A function_call and its output (text, then images as content items)."""
        self.add(
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": orjson.dumps({"command": ["bash", "-lc", command]}).decode(),
                "call_id": call_id,
            },
        )
        result: Any = output
        if images:
            result = [{"type": "input_text", "text": output}, *(image_item(i) for i in images)]
        self.add(
            "response_item",
            {"type": "function_call_output", "call_id": call_id, "output": result},
            images,
        )

    def apply_patch(self, call_id: str, patch: str, output: str) -> None:
        """An apply_patch call (Codex's freeform tool: the patch is the input) and its output,
        JSON text with the exit code, as Codex writes it."""
        self.add(
            "response_item",
            {
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call_id,
                "name": "apply_patch",
                "input": patch,
            },
        )
        result = {"output": output, "metadata": {"exit_code": 0, "duration_seconds": 0.1}}
        self.add(
            "response_item",
            {
                "type": "custom_tool_call_output",
                "call_id": call_id,
                "output": orjson.dumps(result).decode(),
            },
        )

    def token_count(self, total: dict[str, int], last: dict[str, int]) -> None:
        self.add(
            "event_msg",
            {
                "type": "token_count",
                "info": {"total_token_usage": total, "last_token_usage": last},
                "rate_limits": None,
            },
        )

    def compacted(self, summary: str, images: list[bytes]) -> None:
        history = [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "bygone"}, *map(image_item, images)],
            }
        ]
        self.add("compacted", {"message": summary, "replacement_history": history}, images)

    def text(self) -> bytes:
        return b"".join(line + b"\n" for line in self.lines)


def usage(inp: int, cached: int, out: int, reasoning: int) -> dict[str, int]:
    return {
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "reasoning_output_tokens": reasoning,
        "total_tokens": inp + out,
    }


# The encrypted reasoning blob: base64url, as the API returns it (not standard
# base64, so never cut), and a word in it a search must never find.
SECRET_WORD = "zqxjvencrypted"
ENCRYPTED = f"{SECRET_WORD}-gAAAAAB{base64.urlsafe_b64encode(os.urandom(600)).decode()}"


def full_rollout(session_id: str, *, seed: int = 0) -> Rollout:
    """A rollout with every element: images in the three places, repeated token counts,
    encrypted reasoning, a torn line, an unknown kind."""
    rollout = Rollout(session_id)
    rollout.meta()
    rollout.turn_context()
    rollout.user("fix the flamingo layout", [])
    pasted = [png_bytes(40_000, seed=seed + 1), png_bytes(30_000, seed=seed + 2)]
    rollout.user("please look at the flamingo screenshot", pasted)
    rollout.reasoning("Considering the pelican layout", ENCRYPTED)
    shot = png_bytes(35_000, seed=seed + 3)
    rollout.tool_call("call_1", "view_image shot.png", "captured the heron window", [shot])
    rollout.assistant("The albatross button is misaligned.")
    first = usage(1000, 400, 200, 50)
    rollout.token_count(first, first)
    rollout.token_count(first, first)  # the same count written twice
    rollout.raw(b'{"timestamp":"2025-09-01T10:59:00.000Z","type":"event_msg","payl')  # torn
    rollout.add("x_future_kind", {"note": "an unknown kind passes through"})
    rollout.turn_context("o3")
    rollout.compacted("summary of the earlier turns", [pasted[0]])
    total = usage(3000, 1400, 700, 150)
    rollout.token_count(total, usage(2000, 1000, 500, 100))
    return rollout


def rollout_name(session_id: str) -> str:
    return f"rollout-2025-09-01T10-00-00-{session_id}.jsonl"


def write_rollout(base: Path, rollout: Rollout, *, archived: bool = False) -> Path:
    """Write a rollout under a Codex home's sessions dir (dated) or its archive."""
    directory = base.parent / "archived_sessions" if archived else base / "2025" / "09" / "01"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / rollout_name(rollout.session_id)
    path.write_bytes(rollout.text())
    return path


def old_format_rollout(session_id: str) -> bytes:
    """A rollout of Codex's first format: its first line is no `session_meta` (no project)."""
    head = {"id": session_id, "timestamp": "2025-04-01T10:00:00.000Z", "instructions": "old"}
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    return orjson.dumps(head) + b"\n" + orjson.dumps(message) + b"\n"


def oversized_meta_rollout(session_id: str, size: int) -> bytes:
    """A rollout whose `session_meta` line is `size` bytes or more (too long to be read)."""
    rollout = Rollout(session_id)
    rollout.add("session_meta", {"id": session_id, "cwd": CWD, "instructions": "x" * size})
    rollout.assistant("a rollout with huge instructions")
    return rollout.text()
