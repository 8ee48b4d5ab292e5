"""Latest windows kept as the messages sent, replayed on the event loop (a bounded LRU).

The commonest window is the latest one of a session nobody is writing to: a
viewer opening it, a service polling it. Once such a window went out, its
messages (already serialized: the entries' `EntryBatch` bytes and the end)
are kept under the request that asked for it: the caller's principal, the
validated window parameters (no page token, latest first) and the request's
`max_batch_bytes`. The same request again is answered with those bytes,
without the hop to the window lane and without reading the file.

A kept window is replayed only while all of these hold, checked on the event
loop (one `stat` of the file, no read):

- the file's stamp (scrollback.transcripts `stamp_of`: size, mtime, ctime) is
  the one taken before the window was read, and it had settled then; any
  write, truncation or replacement changes it (a growing session's windows are
  never kept), and its device and inode are the window's;
- it was read at most `max_age` seconds ago (the transcript catalog's rescan
  interval): what the window depends on besides the file's bytes (which
  transcript the session id resolves to for that principal, the sub-agent
  links the insight index knows) is as fresh as the catalog's own answer,
  and a longer-lived window is read again.

Only a local transcript root keeps windows (`stat` of an object in a bucket is
a request to the store, not a syscall). Bounded by a byte budget (the kept
messages plus a fixed overhead per window); a window larger than an eighth of
it is not kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from history_service.tokens import DIRECTION_LATEST_FIRST
from history_service.windows import Window, WindowParams
from scrollback.linefile import SourceStat
from scrollback.principals import Principal
from scrollback.server.serialized import Serialized
from scrollback.transcripts import Stamp, TranscriptFile, stamp_of

# What a kept window costs the budget beyond its messages (key, record, list).
WINDOW_OVERHEAD = 512

# (principal, window parameters, max_batch_bytes): one request as it was asked.
Key = tuple[Principal | None, WindowParams, int]


@dataclass(frozen=True, slots=True)
class _Kept:
    """One window's messages and what they were read from."""

    transcript: TranscriptFile
    dev: int
    ino: int
    stamp: Stamp
    read_at: float
    messages: tuple[Serialized, ...]
    cost: int


class LatestWindows:
    """Latest windows as the messages sent, replayed while their file is unchanged."""

    def __init__(
        self,
        max_bytes: int,
        stat: Callable[[TranscriptFile], SourceStat],
        *,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self._stat = stat
        self._max_age = max_age
        self._clock = clock
        self._kept: OrderedDict[Key, _Kept] = OrderedDict()
        self._bytes = 0
        # Replays and windows kept (for tests and benchmarks).
        self.replays = 0
        self.stores = 0

    @staticmethod
    def key(principal: Principal | None, params: WindowParams, max_batch_bytes: int) -> Key | None:
        """The key a request's window is kept under; None when it is not a latest window."""
        if params.page_token or params.direction != DIRECTION_LATEST_FIRST:
            return None
        return (principal, params, max_batch_bytes)

    def replay(self, key: Key) -> tuple[Serialized, ...] | None:
        """The kept messages of this request, if the window is still what a read would give.

        Runs on the event loop: one `stat` of the transcript, no read. A window
        that no longer holds is dropped.
        """
        kept = self._kept.get(key)
        if kept is None:
            return None
        if self._clock() - kept.read_at <= self._max_age:
            try:
                stat = self._stat(kept.transcript)
            except OSError:
                stat = None
            if (
                stat is not None
                and (stat.st_dev, stat.st_ino) == (kept.dev, kept.ino)
                and stamp_of(stat) == kept.stamp
            ):
                self._kept.move_to_end(key)
                self.replays += 1
                return kept.messages
        self._drop(key)
        return None

    def keep(
        self,
        key: Key,
        transcript: TranscriptFile,
        window: Window,
        read_at: float,
        messages: list[Serialized],
    ) -> None:
        """Keep a window's messages as sent (only if its file had settled when it was read).

        `read_at`: the clock before the window was read (`now()`).
        """
        if window.stamp is None:
            return
        cost = sum(len(message.wire) for message in messages) + WINDOW_OVERHEAD
        if cost > self.max_bytes // 8:
            return
        version = window.identity.version
        self._drop(key)
        self._kept[key] = _Kept(
            transcript, version.dev, version.ino, window.stamp, read_at, tuple(messages), cost
        )
        self._bytes += cost
        self.stores += 1
        while self._bytes > self.max_bytes:
            _, dropped = self._kept.popitem(last=False)
            self._bytes -= dropped.cost

    def now(self) -> float:
        """The clock `keep` takes `read_at` from."""
        return self._clock()

    def _drop(self, key: Key) -> None:
        dropped = self._kept.pop(key, None)
        if dropped is not None:
            self._bytes -= dropped.cost

    @property
    def bytes_held(self) -> int:
        """What the kept windows cost the budget now."""
        return self._bytes

    def per_window_limit(self) -> int:
        """The largest window's messages kept (bytes)."""
        return self.max_bytes // 8 - WINDOW_OVERHEAD
