"""Fixtures of the security tests: an authenticated history + media pair on 127.0.0.1:0."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from history_service.config import HistoryConfig
from history_service.server import start_history_server
from media_service.config import MediaConfig
from media_service.server import start_media_server
from scrollback.server.auth import SecuritySettings
from tests.support.security import Pair, write_token_file

PairFactory = Callable[..., Any]


@pytest.fixture
def secured_pair_factory(tmp_path: Path) -> PairFactory:
    """`async with factory(auth=True, **security) as pair`: both servers, one root and state."""

    @asynccontextmanager
    async def start(
        auth: bool = True,
        media_overrides: dict[str, Any] | None = None,
        history_overrides: dict[str, Any] | None = None,
        **security: Any,
    ) -> AsyncIterator[Pair]:
        root = tmp_path / "root"
        state = tmp_path / "state"
        root.mkdir(exist_ok=True)
        if auth:
            security.setdefault("auth_tokens", write_token_file(tmp_path / "tokens.yaml"))
        settings = SecuritySettings(**security)
        history_config = HistoryConfig.from_env(
            {},
            transcripts=root,
            state_dir=state,
            addr="127.0.0.1:0",
            rescan_interval_seconds=0.1,
            watch_poll_seconds=0.05,
            heartbeat_seconds=0.5,
            security=settings,
            **(history_overrides or {}),
        )
        media_config = dataclasses.replace(
            MediaConfig(
                transcripts=root, state_dir=state, addr="127.0.0.1:0", gc_interval_seconds=3600
            ),
            security=settings,
            **(media_overrides or {}),
        ).validate()
        history = await start_history_server(history_config)
        media = await start_media_server(media_config)
        pair = Pair(root, state, history, media)
        try:
            yield pair
        finally:
            for channel in pair.channels:
                await channel.close()
            await history.stop(0.2)
            await media.stop(0.2)

    return start
