"""Latest windows replayed as sent (history_service.latest_windows).

A repeated latest window of a settled file is answered from the messages
kept, byte for byte what a read gives (here: a server with no caches over the
same file); any change to the file (an append, a same-size rewrite in place,
removal, replacement), an older window than the kept one allows, another
principal or another request are read again. Real servers on 127.0.0.1:0, real
files.
"""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.server.auth import SecuritySettings
from tests.support.history import HarnessFactory, HistoryHarness, line, read_page
from tests.support.reasons import assert_reason
from tests.support.security import auth, write_token_file
from tests.support.stamps import SHORT_SETTLING_SECONDS, settle_quickly

SESSION = "latest"
READ_WINDOW = "/scrollback.history.v1.HistoryService/ReadWindow"


def session_lines(count: int, salt: str = "") -> bytes:
    payload = base64.b64encode(os.urandom(3_000)).decode()
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": payload},
    }
    return b"".join(
        line(type="user", uuid=f"u{salt}-{n}", message={"content": [image, {"type": "text"}]})
        if n % 4 == 0
        else line(type="assistant", uuid=f"a{salt}-{n}", message={"content": f"reply {n}"})
        for n in range(count)
    )


async def raw_window(harness: HistoryHarness, metadata: Any = None, **request: Any) -> list[bytes]:
    """A ReadWindow stream's messages as the bytes on the wire."""
    call = harness.channel.unary_stream(
        READ_WINDOW,
        request_serializer=pb.ReadWindowRequest.SerializeToString,
        response_deserializer=lambda data: data,
    )
    return [bytes(m) async for m in call(pb.ReadWindowRequest(**request), metadata=metadata)]


def write(path: Path, data: bytes, offset: int | None = None) -> None:
    """Write `data` at `offset` (None: append)."""
    with open(path, "ab" if offset is None else "r+b") as handle:
        if offset is not None:
            handle.seek(offset)
        handle.write(data)


def whole(path: Path, data: bytes) -> None:
    path.write_bytes(data)


async def settled(path: Path, data: bytes) -> None:
    """Write the whole file and wait until it has settled (its stamp is taken)."""
    whole(path, data)
    await asyncio.sleep(SHORT_SETTLING_SECONDS + 0.1)


@pytest.fixture(autouse=True)
def _quick_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    settle_quickly(monkeypatch)


def replays(harness: HistoryHarness) -> int:
    latest = harness.server.core.latest_windows
    assert latest is not None
    return latest.replays


@pytest.mark.parametrize("batch", [0, 64 * 1024])
async def test_a_repeated_latest_window_is_replayed_byte_for_byte(
    history_server: HarnessFactory, batch: int
) -> None:
    data = session_lines(120)
    request = {"session_id": SESSION, "page_size": 50, "max_batch_bytes": batch}
    async with history_server(rescan_interval_seconds=30) as cached:
        await settled(cached.transcript(SESSION), data)
        first = await raw_window(cached, **request)
        assert replays(cached) == 0
        again = await raw_window(cached, **request)
        assert replays(cached) == 1
        assert again == first
        # Another request (page size, media mode, batch size) is its own window.
        other = await raw_window(cached, **{**request, "page_size": 49})
        assert other != first and replays(cached) == 1
    # The same state (its token key) and file, no caches: the same bytes.
    async with history_server(rescan_interval_seconds=30, entry_cache_bytes=0) as plain:
        assert plain.server.core.latest_windows is None
        assert await raw_window(plain, **request) == again


@pytest.mark.parametrize("change", ["append", "same size rewrite", "replace"])
async def test_a_changed_file_is_read_again(history_server: HarnessFactory, change: str) -> None:
    data = session_lines(60)
    async with history_server(rescan_interval_seconds=30) as harness:
        path = harness.transcript(SESSION)
        await settled(path, data)
        await read_page(harness.stub, session_id=SESSION, page_size=20)
        kept = await read_page(harness.stub, session_id=SESSION, page_size=20)
        assert replays(harness) == 1
        if change == "append":
            write(path, line(type="user", uuid="new", message={"content": "hi"}))
        elif change == "same size rewrite":
            write(path, b"REPLY", len(data) - len(b'reply 59"}}\n'))
            assert os.stat(path).st_size == len(data)
        else:
            replacement = path.with_suffix(".tmp")
            replacement.write_bytes(data.replace(b'"reply 59"', b'"REPLY 59"'))
            os.replace(replacement, path)
        page = await read_page(harness.stub, session_id=SESSION, page_size=20)
        assert replays(harness) == 1
        if change == "append":
            assert page.entries[-1].uuid == "new"
        else:
            assert "REPLY 59" in page.entries[-1].json
        assert page.entries[-1].json != kept.entries[-1].json


async def test_a_removed_file_is_not_found(history_server: HarnessFactory) -> None:
    async with history_server(rescan_interval_seconds=30) as harness:
        path = harness.transcript(SESSION)
        await settled(path, session_lines(30))
        await read_page(harness.stub, session_id=SESSION)
        await read_page(harness.stub, session_id=SESSION)
        assert replays(harness) == 1
        path.unlink()
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await read_page(harness.stub, session_id=SESSION)
        assert_reason(raised.value, Reason.SESSION_NOT_FOUND)


async def test_a_window_older_than_the_rescan_interval_is_read_again(
    history_server: HarnessFactory,
) -> None:
    async with history_server(rescan_interval_seconds=0.3) as harness:
        await settled(harness.transcript(SESSION), session_lines(30))
        await read_page(harness.stub, session_id=SESSION)
        await read_page(harness.stub, session_id=SESSION)
        assert replays(harness) == 1
        await asyncio.sleep(0.4)
        await read_page(harness.stub, session_id=SESSION)
        assert replays(harness) == 1
        # That read kept the window again.
        await read_page(harness.stub, session_id=SESSION)
        assert replays(harness) == 2


async def test_a_growing_file_is_never_replayed(history_server: HarnessFactory) -> None:
    async with history_server(rescan_interval_seconds=30) as harness:
        path = harness.transcript(SESSION)
        whole(path, session_lines(30))
        for _ in range(3):
            await read_page(harness.stub, session_id=SESSION)
        assert replays(harness) == 0


async def test_a_kept_window_never_answers_another_principal(
    history_server: HarnessFactory, tmp_path: Path
) -> None:
    tokens = write_token_file(tmp_path / "tokens.yaml")
    async with history_server(
        rescan_interval_seconds=30, security=SecuritySettings(auth_tokens=tokens)
    ) as harness:
        await settled(harness.transcript(SESSION, project="proj-a"), session_lines(30))
        request = {"session_id": SESSION, "page_size": 10}
        alice = await raw_window(harness, auth("alice"), **request)
        assert await raw_window(harness, auth("alice"), **request) == alice
        assert replays(harness) == 1
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await raw_window(harness, auth("bob"), **request)
        assert_reason(raised.value, Reason.SESSION_NOT_FOUND)
        assert await raw_window(harness, auth("admin"), **request) == alice
        assert replays(harness) == 1


async def test_pages_after_the_first_and_oldest_first_windows_are_not_kept(
    history_server: HarnessFactory,
) -> None:
    async with history_server(rescan_interval_seconds=30) as harness:
        await settled(harness.transcript(SESSION), session_lines(40))
        first = await read_page(harness.stub, session_id=SESSION, page_size=10)
        for _ in range(2):
            await read_page(
                harness.stub, session_id=SESSION, page_size=10, page_token=first.end.next_page_token
            )
            await read_page(
                harness.stub,
                session_id=SESSION,
                page_size=10,
                direction=pb.READ_DIRECTION_OLDEST_FIRST,
            )
        latest = harness.server.core.latest_windows
        assert latest is not None and latest.stores == 1 and latest.replays == 0
