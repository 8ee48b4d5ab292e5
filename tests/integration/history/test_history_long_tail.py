"""The latest window of a transcript whose tail has no newline reads a bounded amount
(issue 11 item 8): the backward scan stops after the max line size, and the
persisted line index (built forward once) gives where the long tail starts.

The tail is a sparse multi-GB run with no newline (`truncate`), so the test is
cheap on disk; bytes read are counted by the kernel (`rchar` of /proc/self/io,
the server runs in this process).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.history import LATEST, HarnessFactory, bytes_read, line, read_page

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
    async with history_server(max_line_size=MAX_LINE) as first:
        path = first.transcript("long-tail")
        write_with_long_tail(path)
        page = await read_page(first.stub, session_id="long-tail", direction=LATEST)
        assert [json.loads(e.json)["uuid"] for e in page.entries] == ["u-0", "u-1", "u-2"]
    # No search indexing in the restarted server: its catch-up pass, in this same
    # process, would read the new file beside the window being measured.
    async with history_server(max_line_size=MAX_LINE, search_indexing=False) as restarted:
        before = bytes_read()
        page = await read_page(restarted.stub, session_id="long-tail", direction=LATEST)
        read = bytes_read() - before
        assert [json.loads(e.json)["uuid"] for e in page.entries] == ["u-0", "u-1", "u-2"]
        # the index persisted: the window reads about one max line size back, not the tail
        assert read < 4 * MAX_LINE, f"read {read} bytes for a window"
