"""Gemini CLI session figures: a session with rewrites served as a Claude Code transcript is.

A Gemini CLI session (docs/contract.md §1) is generated as gemini-cli writes
one: a header, then turns of a user message (every other one with an
`inlineData` image), a gemini message written three times as it streams and
once more with its tokens, and a `$set` of `lastUpdated` after each message.
The same messages (each one's last version, the same text and image
payloads) written as a Claude Code transcript are the baseline. One history server subprocess serves both (the session from a
Gemini home).

- **Latest window** (`gemini_window_vs_claude`): the latest 200 entries of
  the session (its live messages) vs of the same messages as a transcript, interleaved, medians,
  each server having read both once. Target <= 1.5x.
- **First touch** (`gemini_first_touch_vs_small`): the latest window of a
  session the server has never read (a fresh copy each sample) vs of a
  never-read 5 MB one. Target <= 2x: a first window should cost O(window),
  not O(file).
"""

from __future__ import annotations

import base64
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from scrollback.history.v1 import history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.transcripts import PNG_SIGNATURE

MB = 1_000_000
SESSION = "a11ce000-0000-4000-8000-0000000a11ce"
CLAUDE_SESSION = "claude-same-size"
SMALL_BYTES = 5 * MB
# Never-read copies timed for the first-touch figure (each is a copy of the whole session).
FIRST_TOUCH_SAMPLES = 3


def _words(rng: random.Random, count: int) -> str:
    vocabulary = ("the", "file", "test", "server", "window", "photo", "line", "read", "grpc", "fix")
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def write_session(
    path: Path, session_id: str, target_bytes: int, image_bytes: int, claude: Path | None = None
) -> int:
    """Write a Gemini session to `path` until it holds at least `target_bytes`; the turns.

    With `claude`, the same messages (their last versions) are written there as a
    Claude Code transcript: the same text and the same image payloads.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(13)
    stamp = 0

    def now() -> str:
        nonlocal stamp
        stamp += 1
        return f"2026-03-01T{stamp // 3600 % 24:02d}:{stamp // 60 % 60:02d}:{stamp % 60:02d}.000Z"

    written = turn = 0
    twin = open(claude, "wb") if claude is not None else None  # noqa: SIM115 - closed below
    try:
        with open(path, "wb") as handle:

            def put(record: object) -> None:
                nonlocal written
                line = orjson.dumps(record) + b"\n"
                handle.write(line)
                written += len(line)

            def same(role: str, uuid: str, content: list[object]) -> None:
                if twin is not None:
                    twin.write(orjson.dumps({"type": role, "uuid": uuid, "timestamp": now(),
                        "message": {"role": role, "content": content}}) + b"\n")  # fmt: skip

            put({"sessionId": session_id, "projectHash": "0" * 64, "startTime": now(),
                 "lastUpdated": now(), "kind": "main"})  # fmt: skip
            while written < target_bytes:
                text = _words(rng, 40)
                content: list[object] = [{"text": text}]
                blocks: list[object] = [{"type": "text", "text": text}]
                if turn % 2 == 0:
                    raw = PNG_SIGNATURE + rng.randbytes(max(0, image_bytes - len(PNG_SIGNATURE)))
                    data = base64.b64encode(raw).decode()
                    content.append({"inlineData": {"mimeType": "image/png", "data": data}})
                    blocks.append({"type": "image", "source": {"type": "base64",
                                   "media_type": "image/png", "data": data}})  # fmt: skip
                put({"id": f"u{turn}", "timestamp": now(), "type": "user", "content": content})
                same("user", f"u{turn}", blocks)
                put({"$set": {"lastUpdated": now()}})
                reply: dict[str, object] = {"id": f"g{turn}", "timestamp": now(), "type": "gemini",
                    "content": "", "thoughts": [], "tokens": None, "model": "gemini-2.5-pro"}  # fmt: skip
                for words in (20, 60, 120):
                    reply = dict(reply, content=_words(rng, words))
                    put(reply)
                reply["tokens"] = {"input": 1500, "output": 300, "cached": 700, "thoughts": 40,
                                   "tool": 0, "total": 1840}  # fmt: skip
                put(reply)
                same("assistant", f"g{turn}", [{"type": "text", "text": reply["content"]}])
                put({"$set": {"lastUpdated": now()}})
                turn += 1
    finally:
        if twin is not None:
            twin.close()
    return turn


def _chats(home: Path) -> Path:
    return home / "tmp" / "bench" / "chats"


def _file_name(session_id: str) -> str:
    return f"session-2026-03-01T00-00-{session_id[:8]}.jsonl"


def _copy_as(source: Path, session_id: str, original_id: str) -> None:
    """A copy of a session under another id (its header's id changed in place)."""
    target = source.with_name(_file_name(session_id))
    shutil.copyfile(source, target)
    with open(target, "r+b") as handle:
        head = handle.read(256)
        at = head.index(original_id.encode())
        handle.seek(at)
        handle.write(session_id.encode())


async def measure(
    work: Path, size_bytes: int, image_bytes: int, repeats: int, log: Callable[[str], None]
) -> list[Figure]:
    """The latest window of a Gemini session vs a Claude Code transcript of its size, and a
    first window of a never-read one vs of a 5 MB one."""
    base = work / "gemini-bench"
    root, home = base / "root", base / "gemini"
    session = _chats(home) / _file_name(SESSION)
    claude = root / "bench" / f"{CLAUDE_SESSION}.jsonl"
    claude.parent.mkdir(parents=True, exist_ok=True)
    write_session(session, SESSION, size_bytes, image_bytes, claude)
    small_id = "5e5e5000-0000-4000-8000-00000005e5e5"
    small = _chats(home) / _file_name(small_id)
    write_session(small, small_id, SMALL_BYTES, image_bytes)
    size = f"{session.stat().st_size / MB:,.0f} MB"
    fresh = [f"f{k:07x}-0000-4000-8000-000000000000" for k in range(1, FIRST_TOUCH_SAMPLES + 1)]
    small_fresh = [
        f"e{k:07x}-0000-4000-8000-000000000000" for k in range(1, FIRST_TOUCH_SAMPLES + 1)
    ]
    for copy in fresh:
        _copy_as(session, copy, SESSION)
    for copy in small_fresh:
        _copy_as(small, copy, small_id)
    log(f"gemini session {size}, claude transcript the same size, {FIRST_TOUCH_SAMPLES} copies")
    history_proc = procs.history_server(root, base / "state-history", gemini_home=home)
    async with (
        history_proc as history_server,
        services.channel(history_server.addr) as history_channel,
    ):
        history = history_pb2_grpc.HistoryServiceStub(history_channel)
        for name in (SESSION, CLAUDE_SESSION):
            await services.read_window(history, name)  # untimed: the scan and the index

        def window_case(name: str) -> services.TimedCase:
            async def run(_round: int) -> float | None:
                return await services.timed(lambda: services.read_window(history, name))

            return run

        windows = await services.interleave(
            {"gemini": window_case(SESSION), "claude": window_case(CLAUDE_SESSION)}, repeats
        )
        touches: dict[str, list[float]] = {"large": [], "small": []}
        for large_id, small_copy in zip(fresh, small_fresh, strict=True):
            for key, name in (("small", small_copy), ("large", large_id)):
                started = time.perf_counter()
                await services.read_window(history, name)
                touches[key].append(time.perf_counter() - started)
    first = sorted(touches["large"])[len(fresh) // 2]
    first_small = sorted(touches["small"])[len(fresh) // 2]
    return [
        Figure(
            key="gemini_window_vs_claude",
            name=f"latest ReadWindow (200 entries) of a {size} Gemini CLI session with rewrites "
            "vs the same messages as a Claude Code transcript",
            figure=windows["gemini"] * 1e3,
            baseline=windows["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=windows["gemini"] / windows["claude"],
            target=Target("<=", 1.5),
        ),
        Figure(
            key="gemini_first_touch_vs_small",
            name=f"first latest ReadWindow of a never-read {size} Gemini CLI session vs of a "
            "never-read 5 MB one",
            figure=first * 1e3,
            baseline=first_small * 1e3,
            unit="ms",
            baseline_label="5 MB session",
            ratio=first / first_small,
            target=Target("<=", 2.0),
            note=f"medians of {FIRST_TOUCH_SAMPLES} fresh copies each",
        ),
    ]
