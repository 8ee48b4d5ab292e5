"""Calls in flight per principal, counted across the worker processes of one service.

`SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` is a limit on the service, and the
kernel spreads a client's connections over the workers as it likes (one
channel lands on one worker, ten channels on any), so dividing the limit by
the worker count would refuse a one-channel client at a fraction of its
budget, and a per-worker count would let a many-channel client have N times
its budget. Hence one count for the whole service: a fixed-size table in a
file of the parent's run directory, memory-mapped by every worker.

The table has `SLOTS` (4096) slots of (16-byte blake2b digest of the key,
count), open addressing from the digest. Admitting a call takes an exclusive
`flock` on the file, finds the key's slot (or the first slot with no call in
flight), refuses at the limit, else adds one; releasing it subtracts one under
the same lock. Both are a few microseconds, taken on the event loop: the lock
serializes them across workers, so two workers can never both admit the last
slot, and no call waits on a database's busy handler (the SQLite count this
replaces took tens of microseconds, and milliseconds when two workers met).
With 4096 distinct keys holding calls at once the table is full and a new key
is refused (RESOURCE_EXHAUSTED, as over its limit); a key with no call in
flight gives its slot up to the next one.

A worker that dies takes the service down (scrollback.server.workers), and the
run directory is fresh at each start, so no count outlives its calls.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import threading
from pathlib import Path

SLOTS = 4096
_SLOT = struct.Struct("<16sq")  # key digest, calls in flight
_EMPTY = bytes(16)  # a slot never used: no key lies further along its probe chain
TABLE_BYTES = SLOTS * _SLOT.size


def _digest(key: str) -> bytes:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return digest if digest != _EMPTY else b"\x01" + digest[1:]


class SharedStreamCounter:
    """A count of calls in flight per key, shared by every process that opens `path`."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()  # flock does not exclude this process's own threads
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.fstat(self._fd).st_size < TABLE_BYTES:
                    os.ftruncate(self._fd, TABLE_BYTES)  # zeros: every slot empty
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(self._fd, TABLE_BYTES)
        except BaseException:
            os.close(self._fd)
            raise

    def _find(self, digest: bytes, *, insert: bool) -> int:
        """The slot of `digest`; with `insert`, else the first one free; -1 if none (locked)."""
        table = self._map
        start = int.from_bytes(digest[:4], "little") % SLOTS
        free = -1
        for step in range(SLOTS):
            slot = (start + step) % SLOTS
            key, count = _SLOT.unpack_from(table, slot * _SLOT.size)
            if key == digest:
                return slot
            if key == _EMPTY:
                return slot if free < 0 and insert else free if insert else -1
            if free < 0 and count <= 0:
                free = slot
        return free if insert else -1

    def acquire(self, key: str, limit: int) -> bool:
        """Count one more call for `key` unless the service has `limit` already."""
        digest = _digest(key)
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                slot = self._find(digest, insert=True)
                if slot < 0:
                    return False  # every slot holds calls of other keys
                stored, count = _SLOT.unpack_from(self._map, slot * _SLOT.size)
                count = count if stored == digest else 0
                if count >= limit:
                    return False
                _SLOT.pack_into(self._map, slot * _SLOT.size, digest, count + 1)
                return True
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def release(self, key: str) -> None:
        """One call of `key` ended."""
        digest = _digest(key)
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                slot = self._find(digest, insert=False)
                if slot >= 0:
                    _, count = _SLOT.unpack_from(self._map, slot * _SLOT.size)
                    _SLOT.pack_into(self._map, slot * _SLOT.size, digest, max(0, count - 1))
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def total(self, key: str) -> int:
        """Calls of `key` in flight on every worker."""
        digest = _digest(key)
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                slot = self._find(digest, insert=False)
                if slot < 0:
                    return 0
                count: int = _SLOT.unpack_from(self._map, slot * _SLOT.size)[1]
                return count
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Unmap and close the table."""
        with self._lock:
            self._map.close()
            os.close(self._fd)
