"""Requests in flight in this process, and background work that steps aside for them.

Background work (line index builds, the search index's passes) runs on
threads of the serving processes at nice 19 (`background_thread`). The OS
then gives the requests the cores first, but not the GIL: a background thread
that holds it while the OS has put it aside (a nice-19 thread waits behind
every other runnable thread) keeps the process's event loop waiting. So
background loops call `step_aside()` between their steps (a chunk of a file,
a batch of lines): on a background thread it waits, without the GIL, while a
request of this process is in flight or ended less than QUIET_SECONDS ago,
for at most MAX_WAIT_SECONDS at a time, so the work still moves on under a
steady load (a bounded share, not a stop). On any other thread (a request's
own, which may extend an index inline) it returns at once.

The servers' first interceptor (scrollback.server.interceptors.rpc_log)
counts each RPC in and out (`call_started` / `call_ended`), on the event loop
thread; background threads only read the count.
"""

from __future__ import annotations

import threading
import time

# A request ended less than this ago: more are likely to follow (a viewer's burst).
QUIET_SECONDS = 0.02
# The longest a background step waits for requests before it runs anyway.
MAX_WAIT_SECONDS = 0.1
# How long a waiting background step sleeps between looks.
PAUSE_SECONDS = 0.002


class _Calls:
    """The count of requests in flight and when the last one ended."""

    __slots__ = ("active", "ended_at")

    def __init__(self) -> None:
        self.active = 0
        self.ended_at = float("-inf")


_calls = _Calls()
_thread = threading.local()


def call_started() -> None:
    """A request began (its server's event loop thread)."""
    _calls.active += 1


def call_ended() -> None:
    """A request ended (its server's event loop thread)."""
    _calls.active -= 1
    _calls.ended_at = time.monotonic()


def background_thread() -> None:
    """Mark the calling thread as background work: its `step_aside` calls wait for requests."""
    _thread.background = True


def busy() -> bool:
    """True while a request is in flight or ended less than QUIET_SECONDS ago."""
    return _calls.active > 0 or time.monotonic() - _calls.ended_at < QUIET_SECONDS


def step_aside() -> None:
    """On a background thread: wait while requests are being served (at most MAX_WAIT_SECONDS)."""
    if not getattr(_thread, "background", False) or not busy():
        return
    deadline = time.monotonic() + MAX_WAIT_SECONDS
    while busy() and time.monotonic() < deadline:
        time.sleep(PAUSE_SECONDS)
