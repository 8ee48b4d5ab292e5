"""A rollout's project is read once per file, "no project" included (docs/contract.md §1, §11).

Rollouts whose first line is no readable `session_meta` (Codex's first
format, or instructions longer than SESSION_META_MAX) are listed with the
project "" after one read; later refreshes, and the refresh every unknown
session id makes, read none of them again and walk no directory again.
Bytes are counted as this process's rchar, the history server running in it
(no search indexing, whose first pass would read the files).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as pb
from scrollback.layouts import CODEX, SESSION_META_MAX
from tests.support.codex import (
    CWD,
    Rollout,
    old_format_rollout,
    oversized_meta_rollout,
    rollout_name,
    write_rollout,
)
from tests.support.history import HarnessFactory, bytes_read, line, read_page

OVERSIZED = 8
OLD_FORMAT = 200


def _codex_tree(sessions: Path) -> tuple[set[str], str]:
    """Rollouts without a readable session_meta (their ids) and one with it (its id)."""
    day = sessions / "2025" / "09" / "01"
    day.mkdir(parents=True)
    without: set[str] = set()
    for n in range(OVERSIZED + OLD_FORMAT):
        sid = str(uuid.uuid4())
        data = (
            oversized_meta_rollout(sid, SESSION_META_MAX + 100_000)
            if n < OVERSIZED
            else old_format_rollout(sid)
        )
        (day / rollout_name(sid)).write_bytes(data)
        without.add(sid)
    known = str(uuid.uuid4())
    rollout = Rollout(known)
    rollout.meta()
    rollout.assistant("hello")
    write_rollout(sessions, rollout)
    return without, known


async def test_rollouts_without_a_project_are_read_once_and_misses_read_none(
    history_server: HarnessFactory, tmp_path: Path
) -> None:
    sessions = tmp_path / "codex" / "sessions"
    without, known = _codex_tree(sessions)
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "c1.jsonl").write_bytes(line(type="user", uuid="u1"))
    async with history_server(codex_sessions=sessions, search_indexing=False) as harness:
        listed = await harness.stub.ListSessions(pb.ListSessionsRequest(page_size=1000))
        projects = {s.session_id: (s.source, s.project_dir) for s in listed.sessions}
        assert projects[known] == (CODEX, CWD)
        assert {sid: projects[sid] for sid in without} == {sid: (CODEX, "") for sid in without}
        index = harness.server.core.root
        codex = index._codex
        assert codex is not None
        scans = codex.scans
        before = bytes_read()
        for n in range(20):  # each miss refreshes the index at once
            with pytest.raises(grpc.aio.AioRpcError) as missed:
                await read_page(harness.stub, session_id=f"no-such-{n}", direction=1)
            assert missed.value.code() == grpc.StatusCode.NOT_FOUND
        page = await read_page(harness.stub, session_id=known, direction=1)
        assert page.entries
        # The indexes' refresh after the rescan interval reads nothing either.
        refreshes = index.refreshes
        deadline = time.monotonic() + 10
        while index.refreshes < refreshes + 3:
            assert time.monotonic() < deadline, "the index was never refreshed"
            await harness.stub.ListSessions(pb.ListSessionsRequest(page_size=1))
        read = bytes_read() - before
        # The window of the known rollout and the RPCs' own bytes; not one rollout's first line.
        assert read < SESSION_META_MAX // 2, f"read {read} bytes"
        assert codex.scans == scans, "an unknown id walked the Codex dirs again"
