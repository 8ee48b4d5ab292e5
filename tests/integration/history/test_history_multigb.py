"""Search, insight, a window and a thumbnail over one generated multi-GB session (issue 17).

The session is `SCROLLBACK_TEST_BIG_SESSION_GB` GB (default 2): mostly 4 MiB
pasted screenshots (random payloads, as Claude Code writes big sessions), each
followed by a prompt and an assistant message written as two lines sharing
its `message.id`; in the middle, one real PNG beside a word found nowhere
else. History and media servers run as subprocesses (`python -m ...`, so each
one's peak RSS is its own, read from /proc) over it, and:

- search: the history server's start-up indexing pass reaches the middle
  word; its hit opens the window that ends with it;
- insight: GetSession pays one pass over the file and counts every entry,
  photo and token (each message.id once) the generator wrote;
- the latest window, and the 320 px thumbnail of the middle PNG through
  the ref that window minted;
- bounded memory: each server's peak RSS stays under `RSS_BOUND`, whatever
  the file's size (it streams; nothing is proportional to the file).

Marked slow; CI runs it (scripts/test runs every test) at the default 2 GB,
which takes about 11 s here (5 s of it writing the file) since payloads
are cut textually, never parsed; each server's peak RSS was about 200 MiB
(parent and workers summed) at 0.2 GB and at 2 GB alike. Set the variable to a smaller value for a quick local run, or larger
to test more.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import random
import time
from pathlib import Path

import orjson
import pytest
from PIL import Image

from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from scrollback_app.bench import procs, services
from tests.support.history import read_page

GB = 1_000_000_000
MIB = 1 << 20
SESSION = "big-session"
PROJECT = "big-project"
IMAGE_BYTES = 3 * MIB  # raw: 4 MiB of base64 per screenshot line
NEEDLE = "zebrafishneedle"
# Far below the file: a server that held a fraction of it would pass this.
RSS_BOUND = 400 * MIB
USAGE = {"input_tokens": 12, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 9000}


def _size() -> int:
    return int(float(os.environ.get("SCROLLBACK_TEST_BIG_SESSION_GB", "2")) * GB)


def _real_png() -> bytes:
    image = Image.linear_gradient("L").resize((1600, 1000)).convert("RGB")
    image.paste(Image.effect_noise((300, 300), 90).convert("RGB"), (0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _line(number: int, kind: str, message: dict[str, object]) -> bytes:
    entry = {
        "type": kind,
        "uuid": f"00000000-0000-4000-8000-{number:012x}",
        "timestamp": f"2026-11-{1 + number // 86400 % 28:02d}T{number // 3600 % 24:02d}:"
        f"{number // 60 % 60:02d}:{number % 60:02d}Z",
        "message": message,
    }
    return orjson.dumps(entry) + b"\n"


def write_session(path: Path, target: int) -> dict[str, object]:
    """The session; returns what it holds (counts and totals the servers must find)."""
    rng = random.Random(11)
    payload = base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(IMAGE_BYTES)).decode()
    # The screenshot line's text around its payload: written in three pieces, so
    # the 4 MiB payload is never copied into a new line.
    counts = {"user": 0, "assistant": 0}
    photos = messages = output = 0
    number = 0
    middle_uuid = ""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        written = 0
        while written < target:
            number += 1
            if not middle_uuid and written >= target // 2:
                text = f"the middle photo, look for {NEEDLE}"
                data = base64.b64encode(_real_png()).decode()
                middle_uuid = f"00000000-0000-4000-8000-{number:012x}"
            else:
                text, data = f"screenshot {number}", ""
            image = {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "@"},
            }
            head, _, tail = _line(
                number, "user", {"role": "user", "content": [{"type": "text", "text": text}, image]}
            ).partition(b"@")
            for piece in (head, (data or payload).encode(), tail):
                handle.write(piece)
                written += len(piece)
            counts["user"] += 1
            photos += 1
            number += 1
            prompt = _line(number, "user", {"role": "user", "content": f"what is in shot {number}"})
            handle.write(prompt)
            written += len(prompt)
            counts["user"] += 1
            messages += 1
            final = 40 + number % 500
            for out in (3, final):  # streamed: the first line's usage, then the final one
                number += 1
                answer = _line(
                    number,
                    "assistant",
                    {
                        "id": f"msg_{messages:07d}",
                        "role": "assistant",
                        "model": "claude-sonnet-4-5",
                        "content": [{"type": "text", "text": f"it shows window {number}"}],
                        "usage": {**USAGE, "output_tokens": out},
                    },
                )
                handle.write(answer)
                written += len(answer)
                counts["assistant"] += 1
            output += final
        number += 1
        last = _line(number, "user", {"role": "user", "content": "the very last prompt"})
        handle.write(last)
        written += len(last)
        counts["user"] += 1
    return {
        "bytes": written,
        "counts": counts,
        "photos": photos,
        "messages": messages,
        "output": output,
        "middle_uuid": middle_uuid,
        "last_uuid": f"00000000-0000-4000-8000-{number:012x}",
    }


@pytest.mark.slow
async def test_search_insight_window_and_thumbnail_over_a_multi_gb_session(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    transcript = root / PROJECT / f"{SESSION}.jsonl"
    started = time.monotonic()
    try:
        await _check(tmp_path, root, write_session(transcript, _size()), started)
    finally:
        # pytest keeps the last runs' tmp_path: never leave gigabytes behind.
        transcript.unlink(missing_ok=True)


async def _check(tmp_path: Path, root: Path, made: dict[str, object], started: float) -> None:
    size = int(made["bytes"])  # type: ignore[call-overload]
    print(f"generated {size / GB:.2f} GB in {time.monotonic() - started:.1f} s")
    history_proc = procs.history_server(root, tmp_path / "state-history", search_indexing=True)
    media_proc = procs.media_server(root, tmp_path / "state-media")
    async with (
        history_proc as history_server,
        media_proc as media_server,
        services.channel(history_server.addr) as history_channel,
        services.channel(media_server.addr) as media_channel,
    ):
        history = history_pb2_grpc.HistoryServiceStub(history_channel)
        search = search_pb2_grpc.SearchServiceStub(history_channel)
        media = media_pb2_grpc.MediaServiceStub(media_channel)

        # Insight: one pass over the whole file, every total as written.
        step = time.monotonic()
        reply = await history.GetSession(pb.GetSessionRequest(session_id=SESSION), timeout=300)
        insight = reply.session.insight
        print(f"GetSession (first pass) {time.monotonic() - step:.1f} s")
        assert insight.indexed_bytes == size
        assert {c.type: c.count for c in insight.entry_counts} == made["counts"]
        assert insight.photo_count == made["photos"]
        (model,) = insight.models
        assert model.messages == made["messages"]
        assert insight.usage.output_tokens == made["output"]
        assert insight.usage.cache_read_input_tokens == USAGE["cache_read_input_tokens"] * int(
            made["messages"]  # type: ignore[call-overload]
        )

        # Search: the start-up pass reaches the middle word; the hit opens its window.
        step = time.monotonic()
        hits: list[search_pb2.SearchHit] = []
        while not hits and time.monotonic() - step < 300:
            hits = [
                m.hit
                async for m in search.Search(search_pb2.SearchRequest(query=NEEDLE), timeout=30)
                if m.HasField("hit")
            ]
            if not hits:
                await asyncio.sleep(0.5)
        print(f"search found the needle after {time.monotonic() - step:.1f} s")
        (hit,) = hits
        assert hit.session_id == SESSION and hit.entry_uuid == made["middle_uuid"]
        assert hit.has_photos
        at_hit = await read_page(
            history, session_id=SESSION, page_size=5, page_token=hit.window_page_token
        )
        assert at_hit.entries[-1].uuid == made["middle_uuid"]

        # The latest window ends with the last line.
        latest = await read_page(history, session_id=SESSION, page_size=21)
        assert latest.entries[-1].uuid == made["last_uuid"]
        # The last line and five groups of (screenshot, prompt, two answer lines).
        assert [len(e.media_refs) for e in latest.entries] == [1, 0, 0, 0] * 5 + [0]

        # The middle photo's thumbnail, through the ref the window minted.
        (ref,) = at_hit.entries[-1].media_refs
        thumbnail = b""
        metadata = None
        async for message in media.ReadMedia(
            media_pb2.ReadMediaRequest(
                media=media_pb2.MediaSelector(media_ref=ref), size=media_pb2.THUMBNAIL_SIZE_320
            ),
            timeout=120,
        ):
            if message.HasField("metadata"):
                metadata = message.metadata
            else:
                thumbnail += message.data
        assert metadata is not None and metadata.thumbnail_size == media_pb2.THUMBNAIL_SIZE_320
        with Image.open(io.BytesIO(thumbnail)) as image:
            assert image.format == "WEBP" and image.size == (320, 200)

        # Memory stayed bounded, far below the file, in both servers.
        for server in (history_server, media_server):
            peak = server.peak_rss_bytes()
            print(f"{server.name}: peak RSS {peak / MIB:.0f} MiB over a {size / GB:.2f} GB session")
            assert peak < RSS_BOUND, f"{server.name} peaked at {peak / MIB:.0f} MiB"
    print(f"total {time.monotonic() - started:.1f} s")
