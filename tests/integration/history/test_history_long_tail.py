"""The latest window of a transcript whose tail has no newline reads a bounded amount:
the backward scan stops after the max line size, and the persisted line index
(built forward once, in the background) gives where the long tail starts;
until it does, the window is UNAVAILABLE at once (clients retry), never a
read of the whole tail.

The tail is a sparse multi-GB run with no newline (`truncate`), so the test is
cheap on disk; bytes read are counted by the kernel (`rchar` of /proc/self/io,
the server runs in this process).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from tests.support.history import (
    LATEST,
    HarnessFactory,
    Page,
    bytes_read,
    collect,
    line,
    read_page,
)
from tests.support.reasons import assert_reason

TAIL_BYTES = 2 * 1024**3 + 12345
MAX_LINE = 1024 * 1024


def write_with_long_tail(path: Path) -> None:
    with open(path, "wb") as handle:
        for number in range(3):
            handle.write(line(type="user", uuid=f"u-{number}", message={"content": "hi"}))
        handle.write(b'{"type":"user","uuid":"tail","message":"')
        handle.truncate(handle.tell() + TAIL_BYTES)  # a hole: zeros, no newline


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io")
async def test_latest_window_with_a_huge_unterminated_tail_reads_a_bounded_amount(
    history_server: HarnessFactory, tmp_path: Path
) -> None:
    # No search indexing: its pass also feeds the line index, and would race the
    # window to index the tail (this test is about the window's own way there).
    async with history_server(max_line_size=MAX_LINE, search_indexing=False) as first:
        path = first.transcript("long-tail")
        write_with_long_tail(path)
        began = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as pending:
            await read_page(first.stub, session_id="long-tail", direction=LATEST)
        answered = time.monotonic() - began
        assert pending.value.code() == grpc.StatusCode.UNAVAILABLE
        assert_reason(pending.value, Reason.LONG_TAIL_PENDING)
        assert "longer than the max line size" in (pending.value.details() or "")
        deadline = began + 120
        while True:  # as a client retries, until the background build has indexed the tail
            try:
                page = await read_page(first.stub, session_id="long-tail", direction=LATEST)
                break
            except grpc.aio.AioRpcError as error:
                assert_reason(error, Reason.LONG_TAIL_PENDING)
                assert time.monotonic() < deadline, "the tail was never indexed"
                await asyncio.sleep(0.1)
        indexed = time.monotonic() - began
        assert [json.loads(e.json)["uuid"] for e in page.entries] == ["u-0", "u-1", "u-2"]
        # The first answer did not wait for the whole tail to be read.
        assert answered < indexed / 5, (answered, indexed)
    # No search indexing in the restarted server: its catch-up pass, in this same
    # process, would read the new file beside the window being measured.
    async with history_server(max_line_size=MAX_LINE, search_indexing=False) as restarted:
        before = bytes_read()
        page = await read_page(restarted.stub, session_id="long-tail", direction=LATEST)
        read = bytes_read() - before
        assert [json.loads(e.json)["uuid"] for e in page.entries] == ["u-0", "u-1", "u-2"]
        # the index persisted: the window reads about one max line size back, not the tail
        assert read < 4 * MAX_LINE, f"read {read} bytes for a window"


LINES = 300
KEY = "proj/long-tail.jsonl"


def write_lines_then_long_tail(path: Path, tail: int) -> None:
    with open(path, "wb") as handle:
        for number in range(LINES):
            handle.write(line(type="user", uuid=f"u-{number}", message={"content": "hi"}))
        handle.write(b'{"type":"user","uuid":"tail","message":"')
        handle.truncate(handle.tell() + tail)  # a hole: zeros, no newline


def grow(path: Path, by: int) -> None:
    """The tail goes on (still no newline), as an agent writing one huge line."""
    with open(path, "r+b") as handle:
        handle.truncate(os.fstat(handle.fileno()).st_size + by)


async def window(stub: history_pb2_grpc.HistoryServiceStub, **request: Any) -> Page:
    """One ReadWindow page, given up after a while (a window waiting on a build never ends)."""
    _, page = await collect(stub.ReadWindow(pb.ReadWindowRequest(**request), timeout=20))
    return page


async def latest_until_served(stub: history_pb2_grpc.HistoryServiceStub, session_id: str) -> Page:
    """A latest window, retried as a client does while the tail is being located."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return await read_page(stub, session_id=session_id, direction=LATEST, page_size=10)
        except grpc.aio.AioRpcError as error:
            assert_reason(error, Reason.LONG_TAIL_PENDING)
            assert time.monotonic() < deadline, "the tail was never indexed"
            await asyncio.sleep(0.05)


async def test_windows_never_wait_for_nor_read_a_long_tail_the_index_has_not_reached(
    history_server: HarnessFactory,
) -> None:
    async with history_server(max_line_size=MAX_LINE, search_indexing=False) as harness:
        index = harness.server.core.line_index
        assert index is not None
        path = harness.transcript("long-tail")
        write_lines_then_long_tail(path, 64 * 1024 * 1024)
        harness.transcript("other").write_bytes(
            line(type="user", uuid="o-1", message={"content": "hello"})
        )
        first = await latest_until_served(harness.stub, "long-tail")
        assert [json.loads(e.json)["uuid"] for e in first.entries][-1] == f"u-{LINES - 1}"
        assert first.end.next_page_token

        # The tail grows by gigabytes while a build of it runs (it holds the
        # file's build lock, as a background build does): every window answers
        # at once, another session's too.
        grow(path, TAIL_BYTES)
        building = index._lock(KEY)
        building.acquire()
        try:
            latest, following, other = await asyncio.gather(
                window(harness.stub, session_id="long-tail", direction=LATEST),
                window(
                    harness.stub,
                    session_id="long-tail",
                    direction=LATEST,
                    page_size=10,
                    page_token=first.end.next_page_token,
                ),
                window(harness.stub, session_id="other", direction=LATEST),
                return_exceptions=True,
            )
        finally:
            building.release()
        assert isinstance(latest, grpc.aio.AioRpcError), latest
        assert_reason(latest, Reason.LONG_TAIL_PENDING)
        assert isinstance(following, Page), following
        assert [json.loads(e.json)["uuid"] for e in following.entries][-1] == f"u-{LINES - 11}"
        assert isinstance(other, Page), other
        assert [json.loads(e.json)["uuid"] for e in other.entries] == ["o-1"]
        await latest_until_served(harness.stub, "long-tail")

        # No build running and the index behind by gigabytes: the window does
        # not extend it inline (it would read the whole growth), it answers
        # LONG_TAIL_PENDING and leaves that to the background.
        grow(path, TAIL_BYTES)
        with pytest.raises(grpc.aio.AioRpcError) as pending:
            await read_page(harness.stub, session_id="long-tail", direction=LATEST)
        assert_reason(pending.value, Reason.LONG_TAIL_PENDING)
        served = await latest_until_served(harness.stub, "long-tail")
        assert [json.loads(e.json)["uuid"] for e in served.entries][-1] == f"u-{LINES - 1}"
