"""Windows at any position find their lines through the persisted line index (issue 16).

On both state backends: a page token's window reads the lines the index gives
(a few hundred bytes per entry, counted by the kernel's `rchar` of
/proc/self/io: the server runs in this process, search indexing off), not a
256 KiB block of the byte scan; pages stay exactly the file's lines when the
file grows, when it is rewritten behind an index that still looks valid
(same size, same first bytes, same end), when it is truncated, and when the
index rows themselves are wrong; a huge line in the middle is never held.
Expected entries come from the raw file with json.loads, independently of the
server's index and scanner.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scrollback.state.sqlite import database_path
from tests.support.backends import state_backend
from tests.support.history import (
    LATEST,
    OLDEST,
    HarnessFactory,
    bytes_read,
    line,
    line_index_builds_ended,
    read_all,
    read_page,
)

SESSION = "indexed"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """History config overrides selecting the state backend (search indexing off)."""
    for overrides in state_backend(request.param):
        yield {**overrides, "search_indexing": False}


def entry_line(number: int, pad: int = 40) -> bytes:
    return line(type="user", uuid=f"u-{number}", message={"content": "x" * pad})


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def truth(path: Path) -> list[str]:
    """The uuids a window may serve, in file order, from the raw bytes."""
    uuids = []
    for raw in path.read_bytes().split(b"\n"):
        if raw.strip():
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, dict):
                uuids.append(str(value.get("uuid")))
    return uuids


async def served(stub: Any, direction: int, page_size: int) -> list[str]:
    """Every entry of the session, paged in `direction`, in file order."""
    pages = await read_all(stub, SESSION, direction, page_size)
    if direction == LATEST:
        pages = pages[::-1]
    return [json.loads(entry.json)["uuid"] for page in pages for entry in page]


async def assert_pages_match(stub: Any, path: Path, page_size: int = 7) -> None:
    want = truth(path)
    assert await served(stub, OLDEST, page_size) == want
    assert await served(stub, LATEST, page_size) == want


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io")
@pytest.mark.parametrize("direction", [LATEST, OLDEST])
async def test_a_mid_file_page_token_reads_its_lines_through_the_index(
    history_server: HarnessFactory, backend: dict[str, Any], direction: int
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript(SESSION)
        # ~1.5 MB of short lines, blank lines here and there (the index leaves them out).
        path.write_bytes(
            b"".join(entry_line(n) + (b"\n\n" if n % 97 == 0 else b"") for n in range(15_000))
        )
        first = await read_page(harness.stub, session_id=SESSION, direction=direction, page_size=5)
        token = first.end.next_page_token
        # The first page had the index built in the background; a token's window
        # never waits for that build (it scans bytes meanwhile).
        await line_index_builds_ended()
        await read_page(
            harness.stub, session_id=SESSION, direction=direction, page_size=5, page_token=token
        )
        before = bytes_read()
        page = await read_page(
            harness.stub, session_id=SESSION, direction=direction, page_size=5, page_token=token
        )
        read = bytes_read() - before
        want = truth(path)
        got = [json.loads(entry.json)["uuid"] for entry in page.entries]
        assert got == (want[-10:-5] if direction == LATEST else want[5:10])
        # A byte scan reads a 256 KiB block around the boundary; the index, the lines.
        assert read < 96 * 1024, f"read {read} bytes for a 5-entry page"


async def test_pages_through_the_index_follow_an_appended_file(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(entry_line(n) for n in range(300)) + b"\n  \n[1,2]\n")
        await assert_pages_match(harness.stub, path)
        # unterminated: not served yet
        append(path, b"".join(entry_line(n) for n in range(300, 420)) + b'{"uuid":"tail"')
        await assert_pages_match(harness.stub, path)
        append(path, b"}\n")
        await assert_pages_match(harness.stub, path)


async def test_a_same_size_rewrite_behind_a_valid_looking_index_serves_the_new_lines(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript(SESSION)
        head = b"".join(entry_line(n) for n in range(60))  # more than the 4 KiB head hash
        middle = [entry_line(n, pad=30 + n % 7) for n in range(1000, 1300)]
        tail = b"".join(entry_line(n) for n in range(9000, 9005))
        path.write_bytes(head + b"".join(middle) + tail)
        await assert_pages_match(harness.stub, path)
        # The middle again, same bytes in all but different lines: pairs merged
        # into one entry and the bytes saved spent on a blank run, so the size,
        # the first bytes and the bytes before the indexed end stay the same.
        rewritten = bytearray()
        for n in range(0, len(middle), 2):
            a, b = json.loads(middle[n]), json.loads(middle[n + 1])
            merged = line(type="user", uuid=f"m-{n}", message={"content": a["message"]["content"]})
            spare = len(middle[n]) + len(middle[n + 1]) - len(merged)
            assert spare > 0, b
            rewritten += merged + b"\n" * spare
        assert len(rewritten) == sum(map(len, middle))
        stat = os.stat(path)
        overwrite(path, len(head), bytes(rewritten))
        assert os.stat(path).st_size == stat.st_size
        await assert_pages_match(harness.stub, path)


async def test_a_truncated_file_is_read_again_not_from_its_old_index(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript(SESSION)
        lines = [entry_line(n) for n in range(400)]
        path.write_bytes(b"".join(lines))
        await assert_pages_match(harness.stub, path)
        os.truncate(path, sum(map(len, lines[:150])))
        await assert_pages_match(harness.stub, path)
        # and grown again past where the old index reached, with other lines
        append(path, b"".join(entry_line(n, pad=55) for n in range(5000, 5400)))
        await assert_pages_match(harness.stub, path)


def corrupt_rows(state: Path, backend: dict[str, Any], statement: str) -> None:
    """Run `statement` on the line index's rows, behind the index's back."""
    url = backend.get("database_url")
    if url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(statement.replace("?", "%s"))
    else:
        with sqlite3.connect(database_path(state)) as connection:
            connection.execute(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE line_index_line SET line_offset = line_offset + 7",
        "UPDATE line_index_line SET length = length - 1",
        "UPDATE line_index_line SET length = length + 40",
        "DELETE FROM line_index_line WHERE line_offset % 3 = 0",
    ],
)
async def test_wrong_index_rows_never_yield_wrong_bytes(
    history_server: HarnessFactory, backend: dict[str, Any], statement: str
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(
            b"".join(entry_line(n, pad=20 + n % 13) + b"\n" * (n % 5 == 0) for n in range(500))
        )
        await assert_pages_match(harness.stub, path)
        corrupt_rows(harness.state, backend, statement)
        want = truth(path)
        assert await served(harness.stub, OLDEST, 9) == want
        assert await served(harness.stub, LATEST, 9) == want
        for page_size in (1, 50, 200):
            page = await read_page(harness.stub, session_id=SESSION, page_size=page_size)
            assert [json.loads(e.json)["uuid"] for e in page.entries] == want[-page_size:]


async def test_a_huge_line_in_the_middle_is_never_held_whole(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    max_line = 1024 * 1024
    async with history_server(max_line_size=max_line, **backend) as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(entry_line(n) for n in range(50)))
        append(path, b'{"type":"user","uuid":"huge","message":{"content":"')
        append(path, b"y" * (24 * max_line) + b'"}}\n')
        append(path, b"".join(entry_line(n) for n in range(50, 100)))
        await assert_pages_match(harness.stub, path, page_size=10)
        # The index is built by then (its build holds a chunk and a piece of the long line).
        await line_index_builds_ended()
        tracemalloc.start()
        try:
            for direction in (LATEST, OLDEST):
                pages = await read_all(harness.stub, SESSION, direction, 10)
                huge = [e for page in pages for e in page if e.line_size_bytes > 24 * max_line]
                assert len(huge) == 1 and len(huge[0].json) < max_line
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # The 24 MiB line goes by streaming; nothing near its size is held.
        assert peak < 8 * max_line, peak


async def test_a_first_page_builds_the_index_in_the_background(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript(SESSION)
        path.write_bytes(b"".join(entry_line(n) for n in range(3000)))
        index = harness.server.core.line_index
        assert index is not None
        key = str(path.relative_to(harness.root))
        assert index.store.state(key) is None
        page = await read_page(harness.stub, session_id=SESSION, page_size=5)
        assert [e.uuid for e in page.entries] == [f"u-{n}" for n in range(2995, 3000)]
        for _ in range(100):  # the first page scanned bytes; the build runs beside it
            state = index.store.state(key)
            if state is not None and state.covered == path.stat().st_size:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the index was not built after a first page")
        assert await served(harness.stub, LATEST, 11) == truth(path)
