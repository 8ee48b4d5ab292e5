"""Fixtures of the object-storage tests: one real SeaweedFS per test session (per xdist worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.seaweed import FaultProxy, SeaweedServer, seaweed_server


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedServer]:
    """A running `weed mini` with the bucket `transcripts`; tests use prefixes of their own."""
    yield from seaweed_server()


@pytest.fixture
def fault_proxy(seaweed: SeaweedServer) -> Iterator[FaultProxy]:
    """A proxy in front of `seaweed` that passes everything until a test sets a fault."""
    proxy = FaultProxy(seaweed.port)
    try:
        yield proxy
    finally:
        proxy.stop()
