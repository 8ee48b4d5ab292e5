"""The accepted-message bus across replicas: PostgreSQL LISTEN/NOTIFY.

A notification carries ids only (`{"seq", "session_id", "chat_key"}`), never
the message: subscribers read the rows from the store by seq (the watch does
so already; bus events only wake it up). Publishing is a `pg_notify` after
the accept committed, so every replica, this one included, hears it from
its one listening connection, which runs in a thread and hands events to an
InProcessBus on the event loop.

Nothing is lost for good: when the listening connection drops, the thread
reconnects and tells every subscriber events may have been missed
(BusOverflowError: they catch up from the store by seq); and every
`resync_seconds` it compares the highest committed seq with the highest it
heard of, so an accept whose replica died between commit and notify still
wakes the watchers (`SCROLLBACK_HISTORY_BUS_RESYNC_SECONDS`, default 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import orjson
import psycopg

from history_service.accept import AcceptedRecord
from history_service.bus import InProcessBus, Subscription
from scrollback.state.errors import StoreBusyError
from scrollback.state.postgres import Pool, fetch_one

log = logging.getLogger(__name__)

CHANNEL = "scrollback_accepted"
RECONNECT_SECONDS = 1.0
STOP_CHECK_SECONDS = 0.5


def _event(payload: str) -> AcceptedRecord | None:
    """The id-only record a notification names (text, attachments empty)."""
    try:
        data = orjson.loads(payload)
        return AcceptedRecord(
            int(data["seq"]), "", str(data["session_id"]), str(data["chat_key"]), "", (), 0.0
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


class PostgresBus:
    """An AcceptedBus whose events reach every replica on one PostgreSQL database."""

    def __init__(self, url: str, pool: Pool, *, resync_seconds: float = 1.0) -> None:
        self._url = url
        self._pool = pool
        self._resync = resync_seconds
        self._local = InProcessBus()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._heard = 0
        self._connected = threading.Event()

    async def start(self, wait_seconds: float = 10.0) -> None:
        """Start listening (on the running loop); wait until the first LISTEN is in place."""
        self._loop = asyncio.get_running_loop()
        self._heard = await asyncio.to_thread(self._max_seq_from_pool)
        self._thread = threading.Thread(target=self._run, name="scrollback-bus", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._connected.wait, wait_seconds)

    async def publish(self, record: AcceptedRecord) -> None:
        """Notify every replica of a committed accept (ids only)."""
        payload = orjson.dumps(
            {"seq": record.seq, "session_id": record.session_id, "chat_key": record.chat_key}
        ).decode()
        try:
            await asyncio.to_thread(self._notify, payload)
        except (psycopg.Error, OSError, StoreBusyError) as error:
            # The accept is committed already; the listeners' resync wakes the watchers.
            log.warning("bus notify failed (%s); watchers catch up by seq", type(error).__name__)

    def _notify(self, payload: str) -> None:
        # Through `transaction`: a connection the database ended is retried on a new one.
        fetch_one(self._pool, "SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    def subscribe(self) -> Subscription:
        """A new subscription that sees every event heard from now on."""
        return self._local.subscribe()

    def _max_seq_from_pool(self) -> int:
        row = fetch_one(self._pool, "SELECT COALESCE(MAX(seq), 0) FROM accepted_message")
        return int(row[0]) if row else 0

    def _deliver(self, record: AcceptedRecord | None) -> None:
        """On the loop: hand one event to the subscribers (None: events may be lost)."""
        if record is None:
            self._local.lose_events()
        else:
            self._local.publish_nowait(record)

    def _hand_over(self, record: AcceptedRecord | None) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._deliver, record)

    def _run(self) -> None:
        """The listening thread: LISTEN, hand notifications over, resync, reconnect."""
        first = True
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=10) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    if not first:
                        self._hand_over(None)
                    first = False
                    self._connected.set()
                    self._listen(connection)
            except (psycopg.Error, OSError) as error:
                if self._stopping.is_set():
                    break
                log.warning(
                    "bus listener lost its connection (%s); reconnecting", type(error).__name__
                )
                self._connected.set()
                self._stopping.wait(RECONNECT_SECONDS)

    def _listen(self, connection: psycopg.Connection[Any]) -> None:
        next_resync = time.monotonic() + self._resync
        while not self._stopping.is_set():
            for notify in connection.notifies(timeout=STOP_CHECK_SECONDS):
                record = _event(notify.payload)
                if record is None:
                    continue
                self._heard = max(self._heard, record.seq)
                self._hand_over(record)
            if time.monotonic() < next_resync:
                continue
            next_resync = time.monotonic() + self._resync
            row = connection.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM accepted_message"
            ).fetchone()
            committed = int(row[0]) if row else 0
            if committed > self._heard:
                self._heard = committed
                self._hand_over(None)

    def close(self) -> None:
        """Stop listening."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_CHECK_SECONDS + 2)
