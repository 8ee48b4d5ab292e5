"""Fixtures of the CLI tests: `cli_servers`, both real services in a background loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import ServerPair, serving_pair


@pytest.fixture
def cli_servers(tmp_path: Path) -> Iterator[ServerPair]:
    """History and media servers over tmp_path/root and tmp_path/state."""
    yield from serving_pair(tmp_path)
