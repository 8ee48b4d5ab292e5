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

import grpc
import pytest

from scrollback.contract.reasons import Reason
from tests.support.history import LATEST, HarnessFactory, bytes_read, line, read_page
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
