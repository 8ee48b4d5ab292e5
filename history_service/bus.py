"""The bus accepted-message events travel on: a Protocol and the in-process implementation.

Events are the AcceptedRecords themselves, ordered by seq. A subscriber that
falls behind is told so (`BusOverflowError`) and catches up from the store by
seq, which is why events need no buffer of their own: the store is the log.
The PostgreSQL backend (history_service.bus_postgres, LISTEN/NOTIFY across
replicas) implements the same Protocol and delivers through an InProcessBus.
"""

from __future__ import annotations

import asyncio
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
