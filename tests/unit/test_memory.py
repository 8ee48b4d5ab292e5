"""The servers pin glibc's mmap threshold so large line buffers go back to the OS."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from scrollback.server import memory
from scrollback.server.memory import pin_mmap_threshold


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_threshold_is_pinned_and_pinning_again_is_harmless() -> None:
    assert pin_mmap_threshold() is True
    assert pin_mmap_threshold() is True


async def _trims_reach(count: int) -> None:
    """Poll until `count` trims have run, within a deadline well past the trim delay."""
    deadline = time.monotonic() + memory.TRIM_DELAY_SECONDS + 10
    while memory.trims < count:
        assert time.monotonic() < deadline, "the trim never ran"
        await asyncio.sleep(0.02)


@pytest.mark.skipif(memory._malloc_trim is None, reason="needs glibc's malloc_trim")
async def test_a_burst_of_ended_streams_trims_the_heap_once_soon() -> None:
    before = memory.trims
    for _ in range(50):  # fifty streams ending together
        memory.trim_soon()
    await _trims_reach(before + 1)
    memory.trim_soon()  # a later end gets its own trim
    await _trims_reach(before + 2)
    # Each burst had one trim scheduled, so none is left to run.
    assert memory._trim_loop is None and memory.trims == before + 2


@pytest.mark.skipif(memory._malloc_trim is None, reason="needs glibc's malloc_trim")
def test_a_loop_closed_before_its_trim_does_not_block_later_trims() -> None:
    async def end_a_stream_and_leave() -> None:
        memory.trim_soon()  # the loop closes before the trim is due

    asyncio.run(end_a_stream_and_leave())
    before = memory.trims

    async def end_a_stream_and_wait() -> None:
        memory.trim_soon()
        await _trims_reach(before + 1)

    asyncio.run(end_a_stream_and_wait())
    assert memory.trims == before + 1
