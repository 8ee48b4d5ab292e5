"""The entry cache of window entries (history_service.entry_cache, issue 16).

A repeated window is served from entries already stripped and encoded, the
same entries a fresh read gives; a line rewritten in place with the same size
(the file's size, first bytes and end unchanged, so the file identity and the
line index still hold) is read again, not served from the cache; the media
mode and the inline limit are part of the key; the cache stays within its
byte budget, and 0 turns it off. Expected entries come from a server with no
cache, over the same file.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from history_service.lines import RowReads
from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import LATEST, OLDEST, HarnessFactory, line, read_all, read_page
from tests.support.stamps import SHORT_SETTLING_SECONDS, count_calls, settle_quickly

SESSION = "cached"


def image_line(number: int, payload: str) -> bytes:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": payload},
    }
    return line(type="user", uuid=f"i-{number}", message={"content": [image, {"type": "text"}]})


def text_line(number: int, text: str = "hello") -> bytes:
    return line(type="user", uuid=f"t-{number}", message={"content": text})


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def summary(entries: list[pb.Entry]) -> list[tuple[str, str, int, list[str]]]:
    return [(e.uuid, e.json, e.byte_offset, [r.pin for r in e.media_refs]) for e in entries]


async def test_a_repeated_window_comes_from_the_cache(history_server: HarnessFactory) -> None:
    payload = base64.b64encode(os.urandom(30_000)).decode()
    async with history_server() as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(
            b"".join(image_line(n, payload) if n % 3 == 0 else text_line(n) for n in range(90))
        )
        cache = harness.server.core.entry_cache
        assert cache is not None
        first = await read_page(harness.stub, session_id=SESSION, page_size=50)
        hits = cache.hits
        again = await read_page(harness.stub, session_id=SESSION, page_size=50)
        assert summary(again.entries) == summary(first.entries)
        assert cache.hits - hits == 50
        # Page tokens and the other direction reuse the same entries.
        pages = await read_all(harness.stub, SESSION, OLDEST, 20)
        assert [e.uuid for page in pages for e in page][-50:] == [e.uuid for e in first.entries]
        for batch in (0, 4096):
            page = await read_page(
                harness.stub, session_id=SESSION, page_size=50, max_batch_bytes=batch
            )
            assert summary(page.entries) == summary(first.entries)


@pytest.mark.parametrize(
    "where",
    [
        "short line",
        "start of a long line",
        "end of a long line",
    ],
)
async def test_a_same_size_rewrite_of_a_cached_line_is_read_again(
    history_server: HarnessFactory, where: str
) -> None:
    payload = base64.b64encode(os.urandom(30_000)).decode()
    lines = [image_line(n, payload) if n % 2 else text_line(n) for n in range(40)]
    async with history_server() as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(lines))
        await read_page(harness.stub, session_id=SESSION, page_size=20)  # builds the index
        await read_page(harness.stub, session_id=SESSION, page_size=20)  # through it, cached
        # Line 30 (short) or 31 (long, an image): the same bytes but one, kept valid JSON.
        number = 30 if where == "short line" else 31
        offset = sum(map(len, lines[:number]))
        if where == "short line":
            changed = lines[number].replace(b"hello", b"HELLO")
        elif where == "start of a long line":
            changed = lines[number].replace(b'"type":"user"', b'"type":"USER"')
        else:
            changed = lines[number].replace(b'"uuid":"i-31"', b'"uuid":"j-31"')
        assert changed != lines[number] and len(changed) == len(lines[number])
        size = os.stat(path).st_size
        overwrite(path, offset, changed)
        assert os.stat(path).st_size == size
        page = await read_page(harness.stub, session_id=SESSION, page_size=20)
        entry = next(e for e in page.entries if e.byte_offset == offset)
        assert json.loads(entry.json) != json.loads(lines[number])
        if where == "short line":
            assert "HELLO" in entry.json
        elif where == "start of a long line":
            assert entry.type == "USER"
        else:
            assert entry.uuid == "j-31" and [r.entry_uuid for r in entry.media_refs] == ["j-31"]


async def test_media_mode_and_inline_limit_are_part_of_the_key(
    history_server: HarnessFactory,
) -> None:
    payload = base64.b64encode(os.urandom(3_000)).decode()  # 4 KB: over 1 KiB, under 8 KiB
    async with history_server() as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(image_line(n, payload) for n in range(6)))
        requests: list[dict[str, Any]] = [
            {"inline_limit_bytes": 1024},
            {"inline_limit_bytes": 8192},
            {"media_mode": pb.MEDIA_MODE_INLINE, "inline_limit_bytes": 1024},
        ]
        for _ in range(2):  # the second round from the cache
            small, large, inline = [
                (await read_page(harness.stub, session_id=SESSION, **request)).entries
                for request in requests
            ]
            assert all(payload not in e.json and len(e.media_refs) == 1 for e in small)
            assert all(payload in e.json for e in large)
            assert all(payload in e.json and not e.media_refs for e in inline)


async def test_the_cache_stays_within_its_budget_and_can_be_off(
    history_server: HarnessFactory,
) -> None:
    budget = 64 * 1024
    async with history_server(entry_cache_bytes=budget) as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(text_line(n, "z" * 300) for n in range(2000)))
        cache = harness.server.core.entry_cache
        assert cache is not None
        pages = await read_all(harness.stub, SESSION, LATEST, 200)
        assert sum(map(len, pages)) == 2000
        assert 0 < cache.bytes_held <= budget
    async with history_server(entry_cache_bytes=0) as harness:
        harness.transcript(SESSION).write_bytes(b"".join(text_line(n) for n in range(10)))
        assert harness.server.core.entry_cache is None
        for _ in range(2):
            page = await read_page(harness.stub, session_id=SESSION)
            assert [e.uuid for e in page.entries] == [f"t-{n}" for n in range(10)]


@pytest.mark.parametrize("read_after", ["at once", "once it settled again"])
async def test_a_settled_file_skips_the_checks_until_it_changes(
    history_server: HarnessFactory, monkeypatch: pytest.MonkeyPatch, read_after: str
) -> None:
    settle_quickly(monkeypatch)
    marks = count_calls(monkeypatch, RowReads, "mark")
    payload = base64.b64encode(os.urandom(30_000)).decode()
    lines = [image_line(n, payload) if n % 2 else text_line(n) for n in range(40)]
    async with history_server() as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(lines))
        await asyncio.sleep(SHORT_SETTLING_SECONDS + 0.1)
        await read_page(harness.stub, session_id=SESSION, page_size=20)  # builds the index
        await read_page(harness.stub, session_id=SESSION, page_size=20)  # through it, cached
        # The first indexed read checks each cached line once and stamps it...
        await read_page(harness.stub, session_id=SESSION, page_size=20)
        marks.reset()
        # ...so while the file stays as it was, a hit reads nothing to be checked.
        page = await read_page(harness.stub, session_id=SESSION, page_size=20)
        assert marks.calls == 0
        assert [e.uuid for e in page.entries] == [
            f"{'i' if n % 2 else 't'}-{n}" for n in range(20, 40)
        ]
        # A same-size rewrite of the first bytes of a cached long line moves the
        # file's change time: the stamp no longer matches and the line is read again.
        offset = sum(map(len, lines[:31]))
        changed = lines[31].replace(b'"type":"user"', b'"type":"USER"')
        assert len(changed) == len(lines[31])
        overwrite(path, offset, changed)
        if read_after == "once it settled again":
            await asyncio.sleep(SHORT_SETTLING_SECONDS + 0.1)
        page = await read_page(harness.stub, session_id=SESSION, page_size=20)
        assert marks.calls > 0
        assert next(e for e in page.entries if e.byte_offset == offset).type == "USER"
