"""Codex rollout figures: a rollout served as a Claude Code transcript of the same size is.

A Codex CLI rollout (docs/contract.md §1) and a Claude Code transcript are
generated to the same size with the same images (raw bytes, base64): in the
rollout every image is a `data:` URL in a user message, written again in its
`event_msg` copy, with tool calls, reasoning (an opaque `encrypted_content`)
and token counts between; in the transcript, image blocks and text entries as
the other benchmarks write them. One history and one media server subprocess
serve both (the rollout from a Codex sessions dir, the second root).

- **Latest window** (`codex_window_vs_claude`): the latest 200 entries of
  the rollout vs of the transcript, interleaved, medians. Target <= 1.5x: a
  window costs O(window) bytes in either format.
- **Cold image** (`codex_ttfb_cold_vs_claude`): time to first byte of
  ReadMedia of an image of the latest window the media server has not
  resolved before (an `at-<offset>` ref vs a uuid ref, each with its hint),
  interleaved, medians. Target <= 1.5x: either is one line read at a known
  offset, O(1) in the file's size.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable
from pathlib import Path

import orjson

from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.transcripts import PNG_SIGNATURE, write_transcript

MB = 1_000_000
SESSION = "0199b000-0000-7000-8000-00000000be4c"
CLAUDE_SESSION = "claude-same-size"


def _data_url(image_bytes: int, rng: random.Random) -> str:
    raw = PNG_SIGNATURE + rng.randbytes(max(0, image_bytes - len(PNG_SIGNATURE)))
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def _words(rng: random.Random, count: int) -> str:
    vocabulary = ("the", "file", "test", "server", "window", "photo", "line", "read", "grpc", "fix")
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def write_rollout(path: Path, target_bytes: int, image_bytes: int) -> int:
    """Write a rollout to `path` until it holds at least `target_bytes`; the line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    stamp = 0
    written = lines = 0
    total_in = total_out = 0

    def line(kind: str, payload: object) -> bytes:
        nonlocal stamp
        stamp += 1
        moment = f"2025-09-01T{stamp // 3600 % 24:02d}:{stamp // 60 % 60:02d}:{stamp % 60:02d}Z"
        return orjson.dumps({"timestamp": moment, "type": kind, "payload": payload}) + b"\n"

    with open(path, "wb") as handle:
        head = [
            line("session_meta", {"id": SESSION, "cwd": "/bench/project", "cli_version": "0"}),
            line("turn_context", {"cwd": "/bench/project", "model": "gpt-5"}),
        ]
        turn = 0
        while written < target_bytes:
            batch = head
            head = []
            url = _data_url(image_bytes, rng) if turn % 2 == 0 else ""
            text = _words(rng, 40)
            content: list[object] = [{"type": "input_text", "text": text}]
            if url:
                content.append({"type": "input_image", "image_url": url})
            total_in += 1500
            total_out += 300
            usage = {"input_tokens": total_in, "cached_input_tokens": total_in // 2,
                     "output_tokens": total_out, "reasoning_output_tokens": 0,
                     "total_tokens": total_in + total_out}  # fmt: skip
            batch += [
                line("response_item", {"type": "message", "role": "user", "content": content}),
                line(
                    "event_msg",
                    {"type": "user_message", "message": text, "images": [url] if url else []},
                ),
                line(
                    "response_item",
                    {
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": _words(rng, 20)}],
                        "encrypted_content": base64.urlsafe_b64encode(rng.randbytes(900)).decode(),
                    },
                ),
                line(
                    "response_item",
                    {
                        "type": "function_call",
                        "name": "shell",
                        "arguments": orjson.dumps({"command": ["rg", _words(rng, 2)]}).decode(),
                        "call_id": f"call_{turn}",
                    },
                ),
                line(
                    "response_item",
                    {
                        "type": "function_call_output",
                        "call_id": f"call_{turn}",
                        "output": _words(rng, 120),
                    },
                ),
                line(
                    "response_item",
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": _words(rng, 120)}],
                    },
                ),
                line(
                    "event_msg",
                    {"type": "token_count", "info": {"total_token_usage": usage}},
                ),
            ]
            for item in batch:
                handle.write(item)
                written += len(item)
                lines += 1
            turn += 1
    return lines


async def measure(
    work: Path, size_bytes: int, image_bytes: int, repeats: int, log: Callable[[str], None]
) -> list[Figure]:
    """The latest window and a cold image of a rollout vs a Claude Code transcript of its size."""
    base = work / "codex-bench"
    root = base / "root"
    codex = base / "codex" / "sessions"
    rollout = codex / "2025" / "09" / "01" / f"rollout-2025-09-01T00-00-00-{SESSION}.jsonl"
    write_rollout(rollout, size_bytes, image_bytes)
    claude = root / "bench" / f"{CLAUDE_SESSION}.jsonl"
    write_transcript(claude, rollout.stat().st_size, image_bytes=image_bytes)
    sizes = {"codex": rollout.stat().st_size, "claude": claude.stat().st_size}
    log(
        f"codex rollout {sizes['codex'] / MB:,.0f} MB, claude transcript {sizes['claude'] / MB:,.0f} MB"
    )
    history_proc = procs.history_server(root, base / "state-history", codex_sessions=codex)
    media_proc = procs.media_server(root, base / "state-media", codex_sessions=codex)
    async with (
        history_proc as history_server,
        media_proc as media_server,
        services.channel(history_server.addr) as history_channel,
        services.channel(media_server.addr) as media_channel,
    ):
        history = history_pb2_grpc.HistoryServiceStub(history_channel)
        media = media_pb2_grpc.MediaServiceStub(media_channel)
        refs: dict[str, list[ref_pb2.MediaRef]] = {}
        for key, session in (("codex", SESSION), ("claude", CLAUDE_SESSION)):
            window = await services.read_window(history, session)  # untimed: warms the index
            # One ref per entry: each sample is a line the media server has not read.
            refs[key] = list({r.entry_uuid: r for r in reversed(window.refs)}.values())
        if not refs["codex"] or not refs["claude"]:
            raise RuntimeError("the generated rollout or transcript minted no refs")

        def window_case(session: str) -> services.TimedCase:
            async def run(_round: int) -> float | None:
                return await services.timed(lambda: services.read_window(history, session))

            return run

        windows = await services.interleave(
            {"codex": window_case(SESSION), "claude": window_case(CLAUDE_SESSION)}, repeats
        )
        rounds = max(1, min(repeats, len(refs["codex"]), len(refs["claude"])))

        def cold_case(choices: list[ref_pb2.MediaRef]) -> services.TimedCase:
            async def run(round_number: int) -> float | None:
                return await services.media_ttfb(media, choices[round_number % len(choices)])

            return run

        cold = await services.interleave(
            {"codex": cold_case(refs["codex"]), "claude": cold_case(refs["claude"])}, rounds
        )
    size = f"{sizes['codex'] / MB:,.0f} MB"
    return [
        Figure(
            key="codex_window_vs_claude",
            name=f"latest ReadWindow (200 entries) of a {size} Codex rollout vs a Claude Code "
            "transcript of the same size",
            figure=windows["codex"] * 1e3,
            baseline=windows["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=windows["codex"] / windows["claude"],
            target=Target("<=", 1.5),
        ),
        Figure(
            key="codex_ttfb_cold_vs_claude",
            name=f"ReadMedia time to first byte, cold image of the latest window, {size} Codex "
            "rollout (at-<offset> ref) vs Claude Code transcript (uuid ref)",
            figure=cold["codex"] * 1e3,
            baseline=cold["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=cold["codex"] / cold["claude"],
            target=Target("<=", 1.5),
            note=f"cold: a ref the media server has not resolved before; {rounds} samples",
        ),
    ]
