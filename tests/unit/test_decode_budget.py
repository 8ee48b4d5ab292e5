"""The decode budget (scrollback.server.decode_budget): threads, memory, fair turns, leaving."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable

from scrollback.imaging import decode_cost
from scrollback.server.decode_budget import DecodeBudget

MIB = 1024 * 1024


class Gate:
    """Decodes that record when they start and end only when released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._release: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def work(self, name: str) -> Callable[[], str]:
        self._release[name] = threading.Event()

        def run() -> str:
            with self._lock:
                self.started.append(name)
            assert self._release[name].wait(10)
            return name

        return run

    def release(self, name: str) -> None:
        self._release[name].set()


DEADLINE_SECONDS = 10.0


async def until(condition: Callable[[], bool]) -> None:
    """Poll `condition()` on the loop until it holds (a deadline, never a fixed sleep)."""
    deadline = asyncio.get_running_loop().time() + DEADLINE_SECONDS
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


async def test_turns_are_fair_between_principals_and_bounded_in_memory() -> None:
    budget = DecodeBudget(threads=1, memory_bytes=64 * MIB)
    gate = Gate()
    alice = [budget.submit("alice", MIB, gate.work(f"a{n}")) for n in range(4)]
    await until(lambda: gate.started == ["a0"])
    bob = budget.submit("bob", MIB, gate.work("b0"))
    assert budget.queued == 4 and budget.running == 1 and budget.reserved == MIB
    gate.release("a0")
    # Bob's one decode waited for the one of Alice's running, not for her queue.
    await until(lambda: gate.started == ["a0", "b0"])
    for name in ("b0", "a1", "a2", "a3"):
        await until(functools.partial(list.__contains__, gate.started, name))
        gate.release(name)
    assert [await turn.result for turn in [*alice, bob]] == ["a0", "a1", "a2", "a3", "b0"]
    assert budget.reserved == 0 and budget.queued == 0
    budget.close()


async def test_a_decode_waits_for_memory_and_nothing_overtakes_it() -> None:
    budget = DecodeBudget(threads=4, memory_bytes=10 * MIB)
    gate = Gate()
    first = budget.submit("alice", 6 * MIB, gate.work("big1"))
    second = budget.submit("bob", 6 * MIB, gate.work("big2"))
    small = budget.submit("carol", 1 * MIB, gate.work("small"))
    await until(lambda: gate.started == ["big1"])
    assert budget.reserved == 6 * MIB and budget.queued == 2  # big2 waits, small behind it
    gate.release("big1")
    await until(lambda: gate.started[:2] == ["big1", "big2"])
    await until(lambda: "small" in gate.started)
    gate.release("big2")
    gate.release("small")
    assert [await t.result for t in (first, second, small)] == ["big1", "big2", "small"]
    budget.close()


async def test_a_decode_over_the_whole_budget_runs_alone_and_fits_says_so() -> None:
    budget = DecodeBudget(threads=2, memory_bytes=8 * MIB)
    assert budget.fits(8 * MIB) and not budget.fits(decode_cost("image/png", 2048 * 1024 + 1, 10))
    # The GIF and WebP loaders hold the whole file besides the frame.
    assert decode_cost("image/png", 100, 5000) == 400
    assert decode_cost("image/webp", 100, 5000) == decode_cost("image/gif", 100, 5000) == 5400
    gate = Gate()
    huge = budget.submit("alice", 100 * MIB, gate.work("huge"))
    other = budget.submit("bob", MIB, gate.work("other"))
    await until(lambda: gate.started == ["huge"])
    assert budget.reserved == 8 * MIB and budget.queued == 1
    gate.release("huge")
    await until(lambda: gate.started == ["huge", "other"])
    gate.release("other")
    assert (await huge.result, await other.result) == ("huge", "other")
    budget.close()


async def test_a_caller_that_leaves_takes_its_queued_decode_out() -> None:
    budget = DecodeBudget(threads=1, memory_bytes=64 * MIB)
    gate = Gate()
    running = budget.submit("alice", MIB, gate.work("running"))
    waiting = asyncio.ensure_future(budget.run("bob", MIB, gate.work("never")))
    await until(lambda: budget.queued == 1)
    waiting.cancel()
    await until(lambda: budget.queued == 0)
    gate.release("running")
    assert await running.result == "running"
    await until(lambda: budget.running == 0)
    assert gate.started == ["running"] and budget.reserved == 0
    budget.close()


async def test_a_caller_that_leaves_a_running_decode_waits_for_its_end() -> None:
    # The decode reads what its caller holds open (a transcript's file): the caller may close
    # it only once the decode is over.
    budget = DecodeBudget(threads=1, memory_bytes=64 * MIB)
    gate = Gate()
    caller = asyncio.ensure_future(budget.run("alice", MIB, gate.work("running")))
    await until(lambda: gate.started == ["running"])
    caller.cancel()
    for _ in range(5):
        await asyncio.sleep(0)  # let the cancellation be delivered
    assert not caller.done()
    gate.release("running")
    await until(caller.done)
    assert caller.cancelled() and budget.running == 0 and budget.reserved == 0
    budget.close()
