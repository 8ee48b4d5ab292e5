"""The window lane: one thread of its own, and no waiting behind a window that is held up."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable

import pytest

from scrollback.server.lane import Lane

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("lane_test", default="")


def holding(started: threading.Event, release: threading.Event) -> Callable[[], bool]:
    """Work that says it has started on its thread, then holds it until released."""

    def hold() -> bool:
        started.set()
        return release.wait(10)

    return hold


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    """Poll the loop until `condition()` holds, failing after `seconds`."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


async def test_calls_run_on_the_lane_thread_with_the_callers_context() -> None:
    lane = Lane(name="window-lane")
    try:
        _VAR.set("caller")
        names = await asyncio.gather(
            *(lane.run(lambda: (threading.current_thread().name, _VAR.get())) for _ in range(8))
        )
        assert {name for name, _ in names} == {"window-lane_0"}
        assert {value for _, value in names} == {"caller"}
        assert lane.overflows == 0
    finally:
        lane.close()


async def test_an_error_reaches_the_caller() -> None:
    lane = Lane(name="window-lane")

    def fail() -> None:
        raise LookupError("gone")

    try:
        with pytest.raises(LookupError):
            await lane.run(fail)
        assert await lane.run(lambda: 7) == 7  # the lane goes on
    finally:
        lane.close()


async def test_a_held_up_window_does_not_hold_up_the_next() -> None:
    lane = Lane(stuck_after=0.02, name="window-lane")
    started, release = threading.Event(), threading.Event()
    try:
        slow = asyncio.ensure_future(lane.run(holding(started, release)))
        await asyncio.to_thread(started.wait, 5)
        # What is tested is a duration: the call has now run past stuck_after.
        await asyncio.sleep(0.05)
        fast = await asyncio.wait_for(lane.run(lambda: threading.current_thread().name), 2)
        assert not fast.startswith("window-lane")  # the default executor took it
        assert lane.overflows == 1
        assert not slow.done()
        release.set()
        assert await slow is True
        # Idle again: back on the lane.
        assert (await lane.run(lambda: threading.current_thread().name)).startswith("window-lane")
    finally:
        release.set()
        lane.close()


async def test_identical_queued_calls_share_one_run_and_started_ones_are_not_joined() -> None:
    # stuck_after far off: however long the blocker runs, the lane stays the lane.
    lane = Lane(stuck_after=60, name="window-lane")
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def blocker() -> str:
        started.set()
        release.wait(10)
        return "blocker"

    def work(tag: str) -> Callable[[], str]:
        def run() -> str:
            runs.append(tag)
            return tag

        return run

    try:
        first = asyncio.ensure_future(lane.run_shared("other", blocker))
        await asyncio.to_thread(started.wait, 5)  # the lane is busy
        queued = [asyncio.ensure_future(lane.run_shared("same", work(f"w{i}"))) for i in range(5)]
        await asyncio.sleep(0)
        release.set()
        assert await first == "blocker"
        results = await asyncio.gather(*queued)
        assert results == ["w0"] * 5  # the four later callers got the queued call's answer
        assert runs == ["w0"] and lane.joined == 4
        # Started (here: finished) calls are never joined: a new call runs again.
        assert await lane.run_shared("same", work("again")) == "again"
        assert runs == ["w0", "again"]
    finally:
        release.set()
        lane.close()


async def test_a_shared_call_that_fails_fails_every_caller_and_is_forgotten() -> None:
    lane = Lane(stuck_after=60, name="window-lane")
    started, release = threading.Event(), threading.Event()

    def fail() -> None:
        raise LookupError("gone")

    try:
        busy = asyncio.ensure_future(lane.run(holding(started, release)))
        await asyncio.to_thread(started.wait, 5)
        calls = [asyncio.ensure_future(lane.run_shared("k", fail)) for _ in range(3)]
        await asyncio.sleep(0)
        release.set()
        await busy
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(o, LookupError) for o in outcomes)
        assert await lane.run_shared("k", lambda: 1) == 1
    finally:
        release.set()
        lane.close()


async def test_a_full_queue_of_fast_calls_does_not_hold_up_the_next() -> None:
    # The running call is young (stuck_after is far off): only the queue's length overflows.
    lane = Lane(stuck_after=60, name="window-lane", max_queued=3)
    release = threading.Event()
    try:
        queued = [asyncio.ensure_future(lane.run(lambda: release.wait(10))) for _ in range(3)]
        await until(lambda: lane.queued_calls == 3)
        name = await asyncio.wait_for(lane.run(lambda: threading.current_thread().name), 2)
        assert not name.startswith("window-lane")  # the default executor took it
        assert lane.overflows == 1
        release.set()
        assert await asyncio.gather(*queued) == [True, True, True]
        # Drained: back on the lane.
        assert (await lane.run(lambda: threading.current_thread().name)).startswith("window-lane")
        assert lane.overflows == 1
    finally:
        release.set()
        lane.close()
