"""Helpers of the history integration tests: whole windows, lines, error checks."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from history_service.server import RunningHistoryServer
from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from tests.support.reasons import assert_reason

REPO = Path(__file__).resolve().parents[2]


@dataclass
class HistoryHarness:
    """A running server and where its files live."""

    stub: history_pb2_grpc.HistoryServiceStub
    channel: grpc.aio.Channel
    root: Path
    state: Path
    server: RunningHistoryServer
    tmp: Path

    def transcript(self, session_id: str, project: str = "proj") -> Path:
        """The path of a session's transcript (its project dir created)."""
        directory = self.root / project
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{session_id}.jsonl"


HarnessFactory = Callable[..., AbstractAsyncContextManager[HistoryHarness]]


LATEST = pb.READ_DIRECTION_LATEST_FIRST
OLDEST = pb.READ_DIRECTION_OLDEST_FIRST


@dataclass
class Page:
    """One window, with each entry's json reassembled from its chunks."""

    entries: list[pb.Entry]
    end: pb.WindowEnd


async def collect(stream: AsyncIterator[Any]) -> tuple[list[Any], Page]:
    """Read a ReadWindow or Bootstrap stream: (headers, page)."""
    headers: list[Any] = []
    entries: list[pb.Entry] = []
    end: pb.WindowEnd | None = None
    # Chunks continue only an entry sent alone, never the last one of a batch.
    alone = False
    async for message in stream:
        item = message.WhichOneof("item")
        assert end is None, "nothing may follow the WindowEnd"
        if item == "header":
            headers.append(message.header)
        elif item == "entry":
            entries.append(message.entry)
            alone = True
        elif item == "entries":
            assert message.entries.entries, "a batch holds at least one entry"
            entries.extend(message.entries.entries)
            alone = False
        elif item == "entry_json_chunk":
            chunk = message.entry_json_chunk
            assert alone and entries and entries[-1].byte_offset == chunk.byte_offset
            entries[-1].json += chunk.json_part
        else:
            assert item == "end", item
            end = message.end
        assert message.ByteSize() < 4 * 1024 * 1024
    assert end is not None, "a window ends with a WindowEnd"
    for entry in entries:
        assert len(entry.json.encode()) == entry.json_size_bytes
    return headers, Page(entries, end)


async def read_page(stub: history_pb2_grpc.HistoryServiceStub, **request: Any) -> Page:
    """One ReadWindow page."""
    _, page = await collect(stub.ReadWindow(pb.ReadWindowRequest(**request)))
    return page


async def read_all(
    stub: history_pb2_grpc.HistoryServiceStub, session_id: str, direction: int, page_size: int = 0
) -> list[list[pb.Entry]]:
    """Every page of a session in one direction."""
    pages: list[list[pb.Entry]] = []
    token = ""
    while True:
        page = await read_page(
            stub, session_id=session_id, direction=direction, page_size=page_size, page_token=token
        )
        pages.append(page.entries)
        token = page.end.next_page_token
        if not token:
            return pages


async def line_index_builds_ended() -> None:
    """Wait until no background line index build (scrollback.lineindex) runs in this process."""
    deadline = time.monotonic() + 60
    while any(thread.name == "line-index-build" for thread in threading.enumerate()):
        assert time.monotonic() < deadline, "a background line index build never ended"
        await asyncio.sleep(0.01)


def bytes_read() -> int:
    """The bytes this process has read so far (rchar of /proc/self/io): what a window cost."""
    with open("/proc/self/io") as io:
        for row in io:
            if row.startswith("rchar:"):
                return int(row.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def line(**fields: Any) -> bytes:
    """One compact JSON line with its newline."""
    return orjson.dumps(fields) + b"\n"


async def expect_error(
    call: Awaitable[Any], code: grpc.StatusCode, tmp: Path, reason: Reason | None = None
) -> str:
    """Await a unary call or drain a stream; assert its status, its reason, that no path leaks.

    Every error carries an ErrorInfo whose reason agrees with the status code;
    with `reason`, it must be that one.
    """
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        if hasattr(call, "__aiter__"):
            async for _ in call:  # type: ignore[attr-defined]
                pass
        else:
            await call
    error = raised.value
    assert error.code() == code, (error.code(), error.details())
    assert_reason(error, reason)
    details = error.details() or ""
    assert str(tmp) not in details and ".jsonl" not in details and "/tmp" not in details
    return details
