"""The bus accepted-message events travel on: a Protocol and the in-process implementation.

Events are the AcceptedRecords themselves, ordered by seq. A subscriber that
falls behind is told so (`BusOverflowError`) and catches up from the store by
seq, which is why events need no buffer of their own: the store is the log.
The PostgreSQL backend (history_service.bus_postgres, LISTEN/NOTIFY across
replicas) implements the same Protocol and delivers through an InProcessBus.
Worker processes sharing one SQLite database use `PollingBus`: the local
events, plus a look at the highest committed seq every poll interval, which
wakes the watchers when another worker accepted something.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

from history_service.accept import AcceptedRecord

SUBSCRIBER_QUEUE = 1024


class BusOverflowError(Exception):
    """The subscriber missed events; it must catch up from the store by seq."""


class Subscription(Protocol):
    """One subscriber's stream of events."""

    async def get(self, wait_seconds: float) -> AcceptedRecord | None:
        """The next event, or None after `wait_seconds`; BusOverflowError if events were lost."""
        ...

    def close(self) -> None:
        """Stop receiving."""
        ...


class AcceptedBus(Protocol):
    """Publishes accepted messages to every live subscriber."""

    async def publish(self, record: AcceptedRecord) -> None:
        """Send one event (after it was committed)."""
        ...

    def subscribe(self) -> Subscription:
        """A new subscription that sees every event published from now on."""
        ...

    def close(self) -> None:
        """Stop delivering (release connections, threads)."""
        ...


class _QueueSubscription:
    def __init__(self, bus: InProcessBus) -> None:
        self._bus = bus
        self.queue: asyncio.Queue[AcceptedRecord] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self.overflowed = False

    async def get(self, wait_seconds: float) -> AcceptedRecord | None:
        if self.overflowed:
            self.overflowed = False
            while not self.queue.empty():
                self.queue.get_nowait()
            raise BusOverflowError()
        if wait_seconds <= 0 or not self.queue.empty():
            return None if self.queue.empty() else self.queue.get_nowait()
        try:
            return await asyncio.wait_for(self.queue.get(), wait_seconds)
        except TimeoutError:
            return None

    def close(self) -> None:
        self._bus._subscribers.discard(self)


class InProcessBus:
    """An AcceptedBus within one process (one event loop)."""

    def __init__(self) -> None:
        self._subscribers: set[_QueueSubscription] = set()

    async def publish(self, record: AcceptedRecord) -> None:
        """Hand the event to every subscriber; a full one is marked overflowed."""
        self.publish_nowait(record)

    def publish_nowait(self, record: AcceptedRecord) -> None:
        """`publish`, from synchronous code on the loop."""
        for subscriber in list(self._subscribers):
            try:
                subscriber.queue.put_nowait(record)
            except asyncio.QueueFull:
                subscriber.overflowed = True

    def subscribe(self) -> Subscription:
        """Subscribe from now on."""
        subscription = _QueueSubscription(self)
        self._subscribers.add(subscription)
        return subscription

    def lose_events(self) -> None:
        """Tell every subscriber events may have been missed (they catch up by seq)."""
        for subscriber in list(self._subscribers):
            subscriber.overflowed = True

    def close(self) -> None:
        """Nothing to release in process."""


class PollingBus:
    """An AcceptedBus for worker processes sharing one SQLite database.

    Accepts made in this process are delivered at once (InProcessBus). Every
    `poll_seconds`, while anyone subscribes, it reads the highest committed
    seq (one indexed read); one it has not heard of, accepted by another
    worker, wakes every subscriber, which catches up from the store by seq.
    """

    def __init__(self, last_seq: Callable[[], int], *, poll_seconds: float) -> None:
        self._last_seq = last_seq
        self._poll = poll_seconds
        self._local = InProcessBus()
        self._heard = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start polling (on the running loop) from the seq committed now."""
        self._heard = await asyncio.to_thread(self._last_seq)
        self._task = asyncio.create_task(self._run())

    async def publish(self, record: AcceptedRecord) -> None:
        """Deliver a local accept; the next seq in order needs no wake-up by poll."""
        if record.seq == self._heard + 1:
            self._heard = record.seq
        self._local.publish_nowait(record)

    def subscribe(self) -> Subscription:
        """Subscribe from now on."""
        return self._local.subscribe()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._poll)
            if not self._local._subscribers:
                continue
            committed = await asyncio.to_thread(self._last_seq)
            if committed > self._heard:
                self._heard = committed
                self._local.lose_events()

    def close(self) -> None:
        """Stop polling."""
        if self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._task.cancel()
