"""Calls in flight per principal, counted across the worker processes of one service.

`SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` is a limit on the service, and the
kernel spreads a client's connections over the workers as it likes (one
channel lands on one worker, ten channels on any), so dividing the limit by
the worker count would refuse a one-channel client at a fraction of its
budget, and a per-worker count would let a many-channel client have N times
its budget. Hence one count for the whole service: a fixed-size table in a
file of the parent's run directory, memory-mapped by every worker.

The table has `SLOTS` (4096) slots of (16-byte blake2b digest of the key,
one count per worker), open addressing from the digest. Admitting a call takes
an exclusive `flock` on the file, finds the key's slot (or the first slot with
no call in flight), refuses when the workers' counts sum to the limit, else adds
one to this worker's count; releasing it subtracts one under the same lock.
Both are a few microseconds, taken on the event loop: the lock serializes them
across workers, so two workers can never both admit the last slot, and no call
waits on a database's busy handler (the SQLite count this replaces took tens of
microseconds, and milliseconds when two workers met). With 4096 distinct keys
holding calls at once the table is full and a new key is refused
(RESOURCE_EXHAUSTED, as over its limit); a key with no call in flight gives its
slot up to the next one.

Each worker counts in its own column (its index among the service's workers)
because a worker may die with calls in flight: the parent then zeroes that
column (`forget_worker`) before the worker's replacement takes the index over,
so no count outlives its calls.
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
_EMPTY = bytes(16)  # a slot never used: no key lies further along its probe chain


def table_bytes(workers: int) -> int:
    """The size of the table of a service of `workers` workers."""
    return SLOTS * (16 + 8 * workers)


def _digest(key: str) -> bytes:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return digest if digest != _EMPTY else b"\x01" + digest[1:]


class SharedStreamCounter:
    """A count of calls in flight per key, shared by every process that opens `path`.

    `workers` is the service's worker count (the table's columns, the same in
    every process that opens it) and `worker` this process's column.
    """

    def __init__(self, path: Path, *, workers: int = 1, worker: int = 0) -> None:
        if not 0 <= worker < workers:
            raise ValueError(f"worker {worker} is not one of {workers}")
        self._worker = worker
        self._row = struct.Struct(f"<16s{workers}q")  # a slot: key digest, one count per worker
        self._slot = self._row.size
        self._bytes = table_bytes(workers)
        self._lock = threading.Lock()  # flock does not exclude this process's own threads
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.fstat(self._fd).st_size < self._bytes:
                    os.ftruncate(self._fd, self._bytes)  # zeros: every slot empty
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(self._fd, self._bytes)
        except BaseException:
            os.close(self._fd)
            raise

    def _read(self, slot: int) -> tuple[bytes, list[int]]:
        key, *counts = self._row.unpack_from(self._map, slot * self._slot)
        return key, counts

    def _write(self, slot: int, key: bytes, counts: list[int]) -> None:
        self._row.pack_into(self._map, slot * self._slot, key, *counts)

    def _find(self, digest: bytes, *, insert: bool) -> int:
        """The slot of `digest`; with `insert`, else the first one free; -1 if none (locked)."""
        start = int.from_bytes(digest[:4], "little") % SLOTS
        free = -1
        for step in range(SLOTS):
            slot = (start + step) % SLOTS
            key, counts = self._read(slot)
            if key == digest:
                return slot
            if key == _EMPTY:
                return slot if free < 0 and insert else free if insert else -1
            if free < 0 and sum(counts) <= 0:
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
                stored, counts = self._read(slot)
                if stored != digest:
                    counts = [0] * len(counts)
                if sum(counts) >= limit:
                    return False
                counts[self._worker] += 1
                self._write(slot, digest, counts)
                return True
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def release(self, key: str) -> None:
        """One call of `key`, admitted by this process, ended."""
        digest = _digest(key)
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                slot = self._find(digest, insert=False)
                if slot >= 0:
                    _, counts = self._read(slot)
                    counts[self._worker] = max(0, counts[self._worker] - 1)
                    self._write(slot, digest, counts)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def total(self, key: str) -> int:
        """Calls of `key` in flight on every worker."""
        digest = _digest(key)
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                slot = self._find(digest, insert=False)
                return 0 if slot < 0 else sum(self._read(slot)[1])
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def forget_worker(self, worker: int) -> None:
        """Zero the counts of a worker that has died (its calls ended with it)."""
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                for slot in range(SLOTS):
                    key, counts = self._read(slot)
                    if counts[worker]:
                        counts[worker] = 0
                        self._write(slot, key, counts)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Unmap and close the table."""
        with self._lock:
            self._map.close()
            os.close(self._fd)
