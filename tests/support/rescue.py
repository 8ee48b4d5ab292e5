"""Sessions that images have broken, as Claude Code writes them, for the slim and images tests.

`broken_session` lays out under a transcripts root one session holding each
case `scrollback slim` must handle: a pasted screenshot over 2000 px, a Read
of an image with its `toolUseResult` copy, a PDF document block, `progress`
lines, a sub-agent thread (in `<id>/subagents/`) with an image, a tiny image
that stays inline, and a half-written last line. Images are real PNG and JPEG
files made with Pillow, so pixel sizes can be checked.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from PIL import Image

SESSION = "5f0c6a8e-1b2c-4d3e-8f90-a1b2c3d4e5f6"
AGENT = "agent-a1b2c3"
PROJECT = "-home-user-app"


def picture(width: int, height: int, fmt: str = "PNG", *, seed: int = 0) -> bytes:
    """A real image of that size: a gradient with some texture, PNG or JPEG."""
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    pixels = image.load()
    assert pixels is not None
    for x in range(0, width, 37):
        for y in range(0, height, 29):
            pixels[x, y] = ((x * 7 + seed) % 256, (y * 13 + seed) % 256, (x + y) % 256)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def noisy_png(width: int, height: int) -> bytes:
    """A real PNG of that size that does not compress: a large payload for its pixels."""
    out = io.BytesIO()
    Image.effect_noise((width, height), 90).convert("RGB").save(out, format="PNG")
    return out.getvalue()


def b64(data: bytes) -> str:
    """Base64 text of bytes."""
    return base64.b64encode(data).decode("ascii")


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    """An image content block."""
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": b64(data)},
    }


def line(fields: dict[str, Any]) -> bytes:
    """One compact JSON line, newline included."""
    return orjson.dumps(fields) + b"\n"


@dataclass(frozen=True)
class BrokenSession:
    """What `broken_session` wrote and what it holds."""

    path: Path
    subagent_path: Path
    screenshot: bytes  # 2400x1600 PNG, pasted
    read_image: bytes  # 900x700 JPEG, read by a tool (and copied in toolUseResult)
    pdf: bytes
    agent_image: bytes  # 640x480 PNG in the sub-agent
    tiny: bytes  # 4x4 PNG, small enough to stay inline
    complete_lines: int
    tail: bytes  # the half-written last line


def _entry(kind: str, uuid: str, parent: str | None, content: Any, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "parentUuid": parent,
        "isSidechain": False,
        "type": kind,
        "message": {"role": kind, "content": content},
        "uuid": uuid,
        "timestamp": "2026-05-01T10:00:00.000Z",
        "sessionId": SESSION,
        "cwd": "/home/user/app",
    }
    fields.update(extra)
    return fields


def broken_session(root: Path) -> BrokenSession:
    """Write the session and its sub-agent under `root`; return what they hold."""
    screenshot = picture(2400, 1600)
    read_image = picture(900, 700, "JPEG", seed=3)
    pdf = b"%PDF-1.4\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"
    agent_image = picture(640, 480, seed=5)
    tiny = picture(4, 4, seed=9)
    lines = [
        line({"type": "summary", "summary": "fixing the login page", "leafUuid": "u-9"}),
        line(
            _entry(
                "user",
                "u-1",
                None,
                [{"type": "text", "text": "here is the screen"}, image_block(screenshot)],
            )
        ),
        line(
            _entry(
                "assistant",
                "a-1",
                "u-1",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_read",
                        "name": "Read",
                        "input": {"file_path": "/tmp/x.jpg"},
                    }
                ],
            )
        ),
        line(
            _entry(
                "user",
                "u-2",
                "a-1",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_read",
                        "content": [image_block(read_image, "image/jpeg")],
                    }
                ],
                toolUseResult={
                    "type": "image",
                    "file": {
                        "base64": b64(read_image),
                        "type": "image/jpeg",
                        "originalSize": len(read_image),
                    },
                },
            )
        ),
        line(
            {
                "parentUuid": "u-2",
                "isSidechain": False,
                "type": "progress",
                "data": {
                    "type": "agent_progress",
                    "message": {"type": "user", "message": {"content": [image_block(tiny)]}},
                },
                "uuid": "p-1",
                "timestamp": "2026-05-01T10:00:01.000Z",
                "sessionId": SESSION,
            }
        ),
        line(
            _entry(
                "user",
                "u-3",
                "p-1",
                [
                    {"type": "text", "text": "and the spec"},
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": b64(pdf),
                        },
                    },
                    image_block(tiny),
                ],
            )
        ),
        line(
            _entry(
                "assistant",
                "a-2",
                "u-3",
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_task",
                        "name": "Task",
                        "input": {"prompt": "look"},
                    }
                ],
            )
        ),
        line(
            _entry(
                "user",
                "u-4",
                "a-2",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_task",
                        "content": [{"type": "text", "text": "done"}],
                    }
                ],
                toolUseResult={"agentId": AGENT.removeprefix("agent-"), "status": "completed"},
            )
        ),
        line(_entry("assistant", "a-3", "u-4", [{"type": "text", "text": "fixed"}])),
        b"",  # a blank line is a line too
    ]
    body = b"".join(lines[:-1]) + b"\n"
    tail = (
        b'{"parentUuid":"a-3","type":"user","message":{"role":"user","content":[{"type":"text","te'
    )
    project = root / PROJECT
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{SESSION}.jsonl"
    path.write_bytes(body + tail)
    agent_dir = project / SESSION / "subagents"
    agent_dir.mkdir(parents=True, exist_ok=True)
    subagent_path = agent_dir / f"{AGENT}.jsonl"
    subagent_path.write_bytes(
        line(
            {
                **_entry("user", "s-1", None, [{"type": "text", "text": "look"}]),
                "isSidechain": True,
                "agentId": AGENT.removeprefix("agent-"),
            }
        )
        + line(
            {
                **_entry(
                    "user",
                    "s-2",
                    "s-1",
                    [{"type": "text", "text": "seen"}, image_block(agent_image)],
                ),
                "isSidechain": True,
            }
        )
    )
    return BrokenSession(
        path,
        subagent_path,
        screenshot,
        read_image,
        pdf,
        agent_image,
        tiny,
        complete_lines=body.count(b"\n"),
        tail=tail,
    )
