"""Fixtures of the deploy tests: `deploy_servers` (both services in a background loop).

The compose test starts the services as subprocesses itself; the grpcurl
test uses `deploy_servers`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import ServerPair, serving_pair


@pytest.fixture
def deploy_servers(tmp_path: Path) -> Iterator[ServerPair]:
    """History and media servers over tmp_path/root and tmp_path/state."""
    yield from serving_pair(tmp_path)
