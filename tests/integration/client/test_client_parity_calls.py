"""The sync and asyncio clients give the same answers over the same real servers.

The signature half of the parity check is tests/unit/client/test_client_parity.py;
this half calls each read the same way through both clients and compares results,
errors included.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from client import AsyncClient, Client
from client.errors import MediaNotFound, SessionNotFound
from tests.support.rescue import SESSION, broken_session
from tests.support.servers import ServerPair, assistant_line, png, user_line

T = TypeVar("T")


def _outcome(call: Callable[[], T]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as error:
        return "error", type(error)


async def _async_outcome(call: Callable[[], Awaitable[T]]) -> tuple[str, Any]:
    try:
        return "ok", await call()
    except Exception as error:
        return "error", type(error)


async def _collect(iterator: Any) -> list[Any]:
    return [item async for item in iterator]


def test_reads_agree(client_servers: ServerPair) -> None:
    pair = client_servers
    pair.transcript("p1").write_bytes(
        user_line("e1", "one", images=(png(1),))
        + assistant_line("e2", "reply")
        + user_line("e3", "two", images=(png(2), png(3)))
    )
    with Client(pair.history_addr, pair.media_addr) as sb:
        sync_sessions = [s.session_id for s in sb.history.iter_sessions()]
        sync_session = sb.history.get_session("p1")
        sync_window = sb.history.read_window("p1", page_size=2)
        sync_all = [e.uuid for e in sb.history.iter_window("p1", page_size=1)]
        refs = [r for e in sb.history.iter_window("p1") for r in e.media_refs]
        sync_media = [sb.media.read_media(ref).data for ref in refs]
        sync_stat = [r.WhichOneof("result") for r in sb.media.stat_media(refs)]
        sync_stream = sb.media.open_media(refs[1], read_offset=3, read_limit=50)
        sync_part = (sync_stream.metadata.sha256, b"".join(sync_stream.chunks()))
        sync_missing = sb.media.find_missing_blobs(["0" * 64])
        sync_errors = [
            _outcome(lambda: sb.history.read_window("nope")),
            _outcome(lambda: sb.media.read_media("nope/e1/0", "0" * 32)),
            _outcome(lambda: sb.history.get_session("nope")),
        ]

    async def async_side() -> tuple[Any, ...]:
        async with AsyncClient(pair.history_addr, pair.media_addr) as sb:
            sessions = [s.session_id for s in await _collect(sb.history.iter_sessions())]
            session = await sb.history.get_session("p1")
            window = await sb.history.read_window("p1", page_size=2)
            every = [e.uuid for e in await _collect(sb.history.iter_window("p1", page_size=1))]
            media = [(await sb.media.read_media(ref)).data for ref in refs]
            stat = [r.WhichOneof("result") for r in await sb.media.stat_media(refs)]
            stream = await sb.media.open_media(refs[1], read_offset=3, read_limit=50)
            part = (stream.metadata.sha256, b"".join(await _collect(stream.chunks())))
            missing = await sb.media.find_missing_blobs(["0" * 64])
            errors = [
                await _async_outcome(lambda: sb.history.read_window("nope")),
                await _async_outcome(lambda: sb.media.read_media("nope/e1/0", "0" * 32)),
                await _async_outcome(lambda: sb.history.get_session("nope")),
            ]
            return sessions, window, every, media, stat, missing, errors, part, session

    sessions, window, every, media, stat, missing, errors, part, session = asyncio.run(async_side())
    assert sessions == sync_sessions == ["p1"]
    assert session.insight == sync_session.insight
    assert {c.type: c.count for c in session.insight.entry_counts} == {"user": 2, "assistant": 1}
    assert session.insight.photo_count == 3
    assert [e.SerializeToString() for e in window.entries] == [
        e.SerializeToString() for e in sync_window.entries
    ]
    assert window.next_page_token == sync_window.next_page_token
    assert every == sync_all == ["e1", "e2", "e3"]
    assert media == sync_media == [png(1), png(2), png(3)]
    assert stat == sync_stat
    assert part == sync_part
    assert part[1] == png(2)[3:53]
    assert missing == sync_missing == ["0" * 64]
    assert (
        errors
        == sync_errors
        == [
            ("error", SessionNotFound),
            ("error", MediaNotFound),
            ("error", SessionNotFound),
        ]
    )


@pytest.mark.parametrize("oldest_first", [False, True])
def test_paging_agrees(client_servers: ServerPair, oldest_first: bool) -> None:
    pair = client_servers
    pair.transcript("p2").write_bytes(
        b"".join(assistant_line(f"u{i}", f"text {i}") for i in range(7))
    )
    with Client(pair.history_addr, pair.media_addr) as sb:
        sync_pages = [
            [e.uuid for e in w.entries]
            for w in sb.history.iter_windows("p2", page_size=3, oldest_first=oldest_first)
        ]

    async def async_pages() -> list[list[str]]:
        async with AsyncClient(pair.history_addr, pair.media_addr) as sb:
            return [
                [e.uuid for e in w.entries]
                for w in await _collect(
                    sb.history.iter_windows("p2", page_size=3, oldest_first=oldest_first)
                )
            ]

    assert asyncio.run(async_pages()) == sync_pages
    assert len(sync_pages) == 3


def test_search_agrees(client_servers: ServerPair) -> None:
    pair = client_servers
    pair.transcript("p1").write_bytes(
        user_line("e1", "alpha quince", timestamp="2025-01-01T00:00:01Z")
        + user_line("e2", "beta quince", timestamp="2025-01-01T00:00:02Z")
        + user_line("e3", "gamma quince", timestamp="2025-01-01T00:00:03Z", images=(png(1),))
    )
    with Client(pair.history_addr, pair.media_addr) as sb:
        deadline = time.monotonic() + 15
        while len(sb.history.search("quince").hits) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        sync_page = sb.history.search("quince", page_size=2)
        sync_all = [h.entry_uuid for h in sb.history.iter_search("quince", page_size=1)]
        sync_photos = [h.entry_uuid for h in sb.history.iter_search("quince", photos=True)]
        sync_error = _outcome(lambda: sb.history.search("quince", session_id="nope"))

    async def async_side() -> tuple[Any, ...]:
        async with AsyncClient(pair.history_addr, pair.media_addr) as sb:
            page = await sb.history.search("quince", page_size=2)
            every = [h.entry_uuid for h in await _collect(sb.history.iter_search("quince"))]
            photos = [
                h.entry_uuid for h in await _collect(sb.history.iter_search("quince", photos=True))
            ]
            error = await _async_outcome(lambda: sb.history.search("quince", session_id="nope"))
            return page, every, photos, error

    page, every, photos, error = asyncio.run(async_side())
    assert [h.entry_uuid for h in sync_page.hits] == [h.entry_uuid for h in page.hits]
    assert [h.entry_uuid for h in page.hits] == ["e3", "e2"] and page.next_page_token
    assert sync_all == every == ["e3", "e2", "e1"]
    assert sync_photos == photos == ["e3"]
    assert sync_error == error == ("error", SessionNotFound)


def test_slim_and_images_agree(client_servers: ServerPair) -> None:
    pair = client_servers
    session = broken_session(pair.root)
    with Client(pair.history_addr, pair.media_addr) as sb:
        sync_slim = [m.SerializeToString() for m in sb.history.slim_session(SESSION, keep_last=1)]
        sync_images = sb.history.list_images(SESSION)
        sync_errors = [
            _outcome(lambda: list(sb.history.slim_session("nope"))),
            _outcome(lambda: sb.history.list_images("nope")),
        ]

    async def async_side() -> tuple[Any, ...]:
        async with AsyncClient(pair.history_addr, pair.media_addr) as sb:
            slim = [
                m.SerializeToString()
                for m in await _collect(sb.history.slim_session(SESSION, keep_last=1))
            ]
            images = await sb.history.list_images(SESSION)
            errors = [
                await _async_outcome(lambda: _collect(sb.history.slim_session("nope"))),
                await _async_outcome(lambda: sb.history.list_images("nope")),
            ]
            return slim, images, errors

    slim, images, errors = asyncio.run(async_side())
    assert slim == sync_slim and len(slim) > 6
    assert images == sync_images and len(images.images) == 5
    assert images.totals.images == 4 and images.images[0].width == 2400
    assert errors == sync_errors == [("error", SessionNotFound)] * 2
    assert session.path.exists()
