"""Codex rollouts in a bucket: each object version's first line is read once (docs/contract.md §11).

Rollouts without a readable `session_meta` (Codex's first format, or a first
line over SESSION_META_MAX) behind the counting proxy of a real SeaweedFS:
after the first listing, later listings and the listing a flood of unknown
session ids makes cost LISTs only, no HEAD and no ranged GET; a rollout
uploaded again (a new version) is read once more.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
import obstore
import pytest

from history_service.config import HistoryConfig
from history_service.server import start_history_server
from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.layouts import CODEX, SESSION_META_MAX
from tests.support.codex import (
    CWD,
    Rollout,
    old_format_rollout,
    oversized_meta_rollout,
    rollout_name,
)
from tests.support.history import line
from tests.support.seaweed import BUCKET, FaultProxy, SeaweedServer


async def test_rollouts_without_a_project_cost_no_request_after_their_first_listing(
    seaweed: SeaweedServer,
    fault_proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name, value in seaweed.env(fault_proxy.endpoint).items():
        monkeypatch.setenv(name, value)
    prefix = f"codex-meta-{uuid.uuid4().hex[:8]}"
    store = seaweed.store()
    obstore.put(store, f"{prefix}/projects/proj/c1.jsonl", line(type="user", uuid="u1"))
    day = f"{prefix}/codex/sessions/2025/09/01"
    without: dict[str, str] = {}
    for n in range(12):
        sid = str(uuid.uuid4())
        data = (
            oversized_meta_rollout(sid, SESSION_META_MAX + 100_000)
            if n < 2
            else old_format_rollout(sid)
        )
        without[sid] = f"{day}/{rollout_name(sid)}"
        obstore.put(store, without[sid], data)
    known = str(uuid.uuid4())
    rollout = Rollout(known)
    rollout.meta()
    obstore.put(store, f"{day}/{rollout_name(known)}", rollout.text())
    config = HistoryConfig.from_env(
        {},
        transcripts=f"s3://{BUCKET}/{prefix}/projects",
        codex_sessions=f"s3://{BUCKET}/{prefix}/codex/sessions",
        state_dir=tmp_path / "state",
        addr="127.0.0.1:0",
        rescan_interval_seconds=0.2,
        search_indexing=False,
    )
    server = await start_history_server(config)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = history_pb2_grpc.HistoryServiceStub(channel)
    try:
        listed = await stub.ListSessions(pb.ListSessionsRequest(page_size=1000))
        projects = {s.session_id: (s.source, s.project_dir) for s in listed.sessions}
        assert projects[known] == (CODEX, CWD)
        assert {sid: projects[sid] for sid in without} == {sid: (CODEX, "") for sid in without}
        root = server.core.root
        heads, ranged = fault_proxy.requests["HEAD"], fault_proxy.ranged
        refreshes = root.refreshes
        deadline = time.monotonic() + 30
        misses = 0
        while root.refreshes < refreshes + 3:  # listings at most once per MIN_LIST_SECONDS
            assert time.monotonic() < deadline, "the bucket was never listed again"
            request = pb.ReadWindowRequest(session_id=f"no-such-{misses}", page_size=1)
            with pytest.raises(grpc.aio.AioRpcError) as missed:
                async for _ in stub.ReadWindow(request):
                    pass
            assert missed.value.code() == grpc.StatusCode.NOT_FOUND
            misses += 1
        assert (fault_proxy.requests["HEAD"] - heads, fault_proxy.ranged - ranged) == (0, 0)
        # A new version of one of them is read once, at the listing that finds it.
        sid, key = next(iter(without.items()))
        meta = Rollout(sid)
        meta.meta(cwd="/srv/moved")
        obstore.put(store, key, meta.text())
        deadline = time.monotonic() + 30
        while True:
            listed = await stub.ListSessions(pb.ListSessionsRequest(page_size=1000))
            if {s.session_id: s.project_dir for s in listed.sessions}[sid] == "/srv/moved":
                break
            assert time.monotonic() < deadline, "the new version was never read"
    finally:
        await channel.close()
        await server.stop(0.5)
