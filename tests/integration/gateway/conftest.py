"""Fixtures of the gateway tests: `stack`, real services and a real gateway on 127.0.0.1:0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayStack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[GatewayStack]:
    """History and media servers (no gateway yet: tests start it with or without auth)."""
    running = GatewayStack(tmp_path)
    try:
        yield running
    finally:
        running.close()
