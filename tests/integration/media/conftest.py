"""Fixtures for the media service's integration tests: real grpc.aio servers on
127.0.0.1:0 over real files in tmp_path, and helpers to write transcripts."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from media_service.config import MediaConfig
from media_service.server import start_media_server
from scrollback.media.v1 import media_pb2_grpc
from tests.support.media import MediaEnv, StartMedia


@pytest.fixture
async def start_media(tmp_path: Path) -> AsyncIterator[StartMedia]:
    """Start media servers (config overrides as keyword arguments); all stopped at the end."""
    started: list[MediaEnv] = []

    async def start(**overrides: object) -> MediaEnv:
        root = tmp_path / "projects"
        state = tmp_path / "state"
        root.mkdir(exist_ok=True)
        config = MediaConfig(
            transcripts=root, state_dir=state, addr="127.0.0.1:0", gc_interval_seconds=3600
        )
        config = dataclasses.replace(config, **overrides).validate()  # type: ignore[arg-type]
        server = await start_media_server(config)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        env = MediaEnv(
            root, state, server, channel, media_pb2_grpc.MediaServiceStub(channel), config
        )
        started.append(env)
        return env

    yield start
    for env in started:
        await env.channel.close()
        await env.server.stop(0)


@pytest.fixture
async def media(start_media: StartMedia) -> MediaEnv:
    """One media server with default settings."""
    return await start_media()
