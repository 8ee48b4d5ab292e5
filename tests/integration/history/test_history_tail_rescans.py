"""An unterminated tail is searched for its newline once per file version: the search
indexer's passes, each watch's start and each watch's polls resume where the
last search stopped, so an idle long tail costs nothing and a growing one its
new bytes only.

The tail is a sparse run with no newline (`truncate`), so the test is cheap on
disk; bytes read are counted by the kernel (`rchar` of /proc/self/io, the
server runs in this process).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import HarnessFactory, HistoryHarness, bytes_read, line

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io")

TAIL_BYTES = 512 * 1024 * 1024
GROWTH = 64 * 1024 * 1024
MAX_LINE = 1024 * 1024
# What reading the lines, the state store and the heads of files may cost besides.
SLACK = 8 * 1024 * 1024


def write_with_long_tail(path: Path) -> None:
    with open(path, "wb") as handle:
        for number in range(20):
            handle.write(line(type="user", uuid=f"u-{number}", message={"content": "hi"}))
        handle.write(b'{"type":"user","uuid":"tail","message":"')
        handle.truncate(handle.tell() + TAIL_BYTES)  # a hole: zeros, no newline


def grow(path: Path, by: int) -> None:
    """The tail goes on (still no newline), as an agent writing one huge line."""
    with open(path, "r+b") as handle:
        handle.truncate(os.fstat(handle.fileno()).st_size + by)


def end_the_tail(path: Path) -> None:
    """The long line ends (its newline), and a short one follows."""
    with open(path, "ab") as handle:
        handle.write(b'"}\n' + line(type="user", uuid="after", message={"content": "later"}))


async def passes_done(harness: HistoryHarness, count: int) -> None:
    """Wait until the search indexer has made `count` more passes."""
    assert harness.server.search is not None
    stats = harness.server.search.indexer.stats
    target = stats.passes + count
    deadline = time.monotonic() + 120
    while stats.passes < target:
        assert time.monotonic() < deadline, "the indexer made no pass"
        await asyncio.sleep(0.01)


async def test_the_search_indexer_searches_a_long_tail_once_then_only_what_was_appended(
    history_server: HarnessFactory,
) -> None:
    async with history_server(max_line_size=MAX_LINE) as harness:
        path = harness.transcript("long-tail")
        write_with_long_tail(path)
        await passes_done(harness, 2)  # the tail searched (once)

        before = bytes_read()
        await passes_done(harness, 3)
        idle = bytes_read() - before
        assert idle < SLACK, f"three passes over an unchanged file read {idle} bytes"

        grow(path, GROWTH)
        before = bytes_read()
        await passes_done(harness, 3)
        grown = bytes_read() - before
        assert grown < GROWTH + SLACK, f"passes read {grown} bytes for {GROWTH} appended"

        # The tail ends: the lines after it are indexed as ever.
        assert harness.server.search is not None
        entries = harness.server.search.indexer.stats.entries
        end_the_tail(path)
        await passes_done(harness, 2)
        state = harness.server.search.index.files()["proj/long-tail.jsonl"]
        assert state.indexed_to == path.stat().st_size
        assert harness.server.search.indexer.stats.entries > entries


async def first_heartbeat(call: grpc.aio.UnaryStreamCall) -> None:
    event = await asyncio.wait_for(call.read(), 60)
    assert event.WhichOneof("event") == "heartbeat"


async def test_watches_search_a_long_tail_once_per_version_and_polls_only_new_bytes(
    history_server: HarnessFactory,
) -> None:
    # No search indexing: its passes, in this process, would read beside the watches measured.
    async with history_server(max_line_size=MAX_LINE, search_indexing=False) as harness:
        path = harness.transcript("long-tail")
        write_with_long_tail(path)
        first = harness.stub.WatchSession(pb.WatchSessionRequest(session_id="long-tail"))
        await first_heartbeat(first)  # where the tail starts: searched once
        first.cancel()

        before = bytes_read()
        watch = harness.stub.WatchSession(pb.WatchSessionRequest(session_id="long-tail"))
        await first_heartbeat(watch)
        started = bytes_read() - before
        assert started < SLACK, f"a second watch start read {started} bytes"

        # The tail grows while the watch polls: each poll reads the new bytes only.
        before = bytes_read()
        for _ in range(4):
            grow(path, GROWTH)
            for _ in range(2):  # a whole round of the watch (a poll, then a heartbeat) after it
                event = await asyncio.wait_for(watch.read(), 60)
                assert event.WhichOneof("event") == "heartbeat"
        polled = bytes_read() - before
        assert polled < 4 * GROWTH + SLACK, f"polls read {polled} bytes for {4 * GROWTH} appended"

        # The tail ends with a newline: the watch serves the line after it.
        end_the_tail(path)
        while True:
            event = await asyncio.wait_for(watch.read(), 60)
            if event.WhichOneof("event") == "entry" and event.entry.uuid == "after":
                break
        watch.cancel()
