"""Synthetic image-heavy transcripts for benchmarks.

Lines look like Claude Code's: compact JSON, user/assistant text turns, and on a
share of the lines a pasted screenshot (a base64 PNG-looking payload) or a tool
result carrying a browser screenshot. Payload bytes are random so nothing
compresses or deduplicates by accident.
"""

from __future__ import annotations

import base64
import os
import random
import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path

import orjson

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _image_block(image_bytes: int, rng: random.Random) -> dict[str, object]:
    raw = PNG_SIGNATURE + rng.randbytes(max(0, image_bytes - len(PNG_SIGNATURE)))
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(raw).decode(),
        },
    }


def _text(rng: random.Random, words: int) -> str:
    vocabulary = ("the", "file", "test", "server", "window", "photo", "line", "read", "grpc", "fix")
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def transcript_lines(
    count: int,
    *,
    image_every: int = 4,
    image_bytes: int = 750_000,
    session_id: str = "bench-session",
    seed: int = 7,
) -> Iterator[bytes]:
    """Yield `count` lines (each ending in a newline); every `image_every`-th carries an image."""
    rng = random.Random(seed)
    parent = None
    for number in range(count):
        entry_uuid = str(uuid_module.UUID(int=rng.getrandbits(128)))
        content: list[object]
        if number % image_every == image_every - 1:
            if number % (2 * image_every) == image_every - 1:
                content = [_image_block(image_bytes, rng), {"type": "text", "text": _text(rng, 30)}]
            else:
                content = [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{number}",
                        "content": [_image_block(image_bytes, rng)],
                    }
                ]
            role, entry_type = "user", "user"
        elif number % 2:
            content = [{"type": "text", "text": _text(rng, 120)}]
            role, entry_type = "assistant", "assistant"
        else:
            content = [{"type": "text", "text": _text(rng, 40)}]
            role, entry_type = "user", "user"
        entry = {
            "parentUuid": parent,
            "isSidechain": False,
            "type": entry_type,
            "message": {"role": role, "content": content},
            "uuid": entry_uuid,
            "sessionId": session_id,
            "timestamp": f"2026-11-01T00:{number // 60 % 60:02d}:{number % 60:02d}.000Z",
        }
        parent = entry_uuid
        yield orjson.dumps(entry) + b"\n"


def write_transcript(path: Path, target_bytes: int, **options: int) -> int:
    """Write lines to `path` until it holds at least `target_bytes`; return the line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = lines = 0
    with open(path, "wb") as handle:
        for line in transcript_lines(1 << 30, **options):  # type: ignore[arg-type]
            handle.write(line)
            written += len(line)
            lines += 1
            if written >= target_bytes:
                break
        handle.flush()
        os.fsync(handle.fileno())
    return lines
