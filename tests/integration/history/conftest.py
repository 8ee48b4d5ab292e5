"""Fixtures of the history integration tests: a real grpc.aio history server on 127.0.0.1:0.

`history_server(**overrides)` starts one over a fresh transcripts root and
state dir in tmp_path and yields a `HistoryHarness` (stub, root, state, port);
the `history` fixture is one with the default limits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from history_service.config import HistoryConfig
from history_service.server import start_history_server
from scrollback.history.v1 import history_pb2_grpc
from tests.support.history import HarnessFactory, HistoryHarness

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def history_server(tmp_path: Path) -> HarnessFactory:
    """A factory: `async with history_server(**config_overrides) as harness`."""

    @asynccontextmanager
    async def start(**overrides: Any) -> AsyncIterator[HistoryHarness]:
        root = overrides.pop("transcripts", tmp_path / "root")
        state = overrides.pop("state_dir", tmp_path / "state")
        root.mkdir(parents=True, exist_ok=True)
        values: dict[str, Any] = {
            "transcripts": root,
            "state_dir": state,
            "addr": "127.0.0.1:0",
            "rescan_interval_seconds": 0.2,
            "watch_poll_seconds": 0.05,
            "heartbeat_seconds": 0.5,
        }
        values.update(overrides)
        config = HistoryConfig.from_env({}, **values)
        server = await start_history_server(config)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        try:
            yield HistoryHarness(
                history_pb2_grpc.HistoryServiceStub(channel), channel, root, state, server, tmp_path
            )
        finally:
            await channel.close()
            await server.stop(0.5)

    return start


@pytest.fixture
async def history(history_server: HarnessFactory) -> AsyncIterator[HistoryHarness]:
    """A history server with default limits."""
    async with history_server() as harness:
        yield harness
