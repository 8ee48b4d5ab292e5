"""ListSessions orders by the session's own last activity, over real servers on both backends.

The last activity is the time of the session's last entry as the insight
index knows it (ListSessions indexes the page it answers, so the next
listing knows it); a file's modification time only stands in where the index
does not cover the file as listed. Touching a file or copying it without
keeping its mtime must not move it up the list.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrollback.history.v1 import history_pb2 as pb
from tests.support.backends import state_backend
from tests.support.history import HarnessFactory, HistoryHarness, line

DAY = 86_400


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """History config overrides selecting the state backend."""
    yield from state_backend(request.param)


def write_session(path: Path, session_id: str, day: str, *, mtime: float) -> None:
    """A short conversation whose entries are all on `day`, its file modified at `mtime`."""
    path.write_bytes(
        line(
            type="user",
            uuid=f"{session_id}-u",
            parentUuid=None,
            sessionId=session_id,
            timestamp=f"{day}T10:00:00Z",
            message={"role": "user", "content": f"question of {session_id}"},
        )
        + line(
            type="assistant",
            uuid=f"{session_id}-a",
            parentUuid=f"{session_id}-u",
            sessionId=session_id,
            timestamp=f"{day}T10:00:05Z",
            message={"role": "assistant", "content": [{"type": "text", "text": "answer"}]},
        )
    )
    os.utime(path, (mtime, mtime))


async def listed(harness: HistoryHarness, page_size: int = 0) -> list[str]:
    """Every session id, page after page, in the order listed."""
    ids: list[str] = []
    token = ""
    while True:
        reply = await harness.stub.ListSessions(
            pb.ListSessionsRequest(page_size=page_size, page_token=token)
        )
        ids += [s.session_id for s in reply.sessions]
        token = reply.next_page_token
        if not token:
            return ids


async def listed_all(harness: HistoryHarness, count: int) -> list[str]:
    """The listing once it shows `count` sessions, listed again after the tree walk's cache
    (0.2 s here) is renewed: the walk may have caught a file half-written."""
    deadline = time.monotonic() + 10
    while len(ids := await listed(harness)) < count:
        assert time.monotonic() < deadline, ids
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)
    return await listed(harness)


async def test_a_touched_file_lists_by_its_last_entry_not_its_mtime(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    now = time.time()
    async with history_server(**backend) as harness:
        write_session(harness.transcript("recent"), "recent", "2025-06-01", mtime=now - DAY)
        write_session(harness.transcript("older"), "older", "2025-01-01", mtime=now - 2 * DAY)
        write_session(harness.transcript("oldest"), "oldest", "2024-01-01", mtime=now - 3 * DAY)
        assert await listed_all(harness, 3) == ["recent", "older", "oldest"]
        # Touched after the others: its file is the newest, its conversation is not.
        os.utime(harness.transcript("older"), (now, now))
        assert await listed(harness) == ["recent", "older", "oldest"]
        # Page tokens carry the same key: one per page, each once, in order.
        assert await listed(harness, page_size=1) == ["recent", "older", "oldest"]
        assert await listed(harness, page_size=2) == ["recent", "older", "oldest"]
        # A session that grew since it was indexed is as new as its file until indexed again.
        with harness.transcript("oldest").open("ab") as grown:
            grown.write(
                line(
                    type="user",
                    uuid="oldest-u2",
                    parentUuid="oldest-a",
                    sessionId="oldest",
                    timestamp="2025-12-01T10:00:00Z",
                    message={"role": "user", "content": "back again"},
                )
            )
        os.utime(harness.transcript("oldest"), (now + 60, now + 60))
        assert await listed(harness) == ["oldest", "recent", "older"]
        assert await listed(harness, page_size=1) == ["oldest", "recent", "older"]


async def test_a_copy_of_an_old_slim_fork_lists_by_its_entries_time(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    now = time.time()
    async with history_server(**backend) as harness:
        original = harness.transcript("original")
        write_session(original, "original", "2025-01-01", mtime=now - 30 * DAY)
        write_session(harness.transcript("recent"), "recent", "2025-06-01", mtime=now - DAY)
        fork = b""
        async for message in harness.stub.SlimSession(
            pb.SlimSessionRequest(session_id="original", fork_session_id="forked")
        ):
            if message.HasField("data"):
                fork += message.data
        assert b'"sessionId":"forked"' in fork
        # Installed as `slim --fork --install` does, then copied with a plain `cp` (new mtime).
        installed = harness.transcript("forked")
        installed.write_bytes(fork)
        os.utime(installed, (now - 30 * DAY, now - 30 * DAY))
        shutil.copyfile(installed, harness.transcript("copied"))
        assert harness.transcript("copied").stat().st_mtime > now - 60
        await listed_all(harness, 4)  # the first listing to show the copy indexes it
        order = await listed(harness)
        assert order.index("recent") < order.index("copied")
        assert order == ["recent", "copied", "forked", "original"]


async def test_a_walk_over_pages_misses_no_session_the_index_reaches_meanwhile(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    # Entries stamped later than their files' mtimes (clocks disagree): a session counts as no
    # later than its file, so being indexed never moves it up past a page token.
    async with history_server(**backend) as harness:
        names = [f"s{n}" for n in range(6)]
        for n, name in enumerate(names):
            write_session(harness.transcript(name), name, "2026-03-01", mtime=1_700_000_000 + n)
        await asyncio.sleep(0.3)  # past the tree walk's cache: the next listing sees them all
        reply = await harness.stub.ListSessions(pb.ListSessionsRequest(page_size=2))
        walked = [s.session_id for s in reply.sessions]
        # Another reader opens the oldest session meanwhile: the index reaches it.
        await harness.stub.GetSession(pb.GetSessionRequest(session_id="s0"))
        token = reply.next_page_token
        while token:
            reply = await harness.stub.ListSessions(
                pb.ListSessionsRequest(page_size=2, page_token=token)
            )
            walked += [s.session_id for s in reply.sessions]
            token = reply.next_page_token
        assert walked == names[::-1]
