"""Process memory settings for servers that handle megabyte-sized lines.

glibc serves allocations over its mmap threshold with their own mappings,
returned to the OS when freed, but it raises that threshold to the size of any
such block once freed. After the first 10 MB image line, every later one then
comes from the threads' heap arenas, which keep the memory: the peak RSS grows
with image size times worker threads. Pinning the threshold at 4 MiB keeps
every larger buffer a mapping of its own, so memory follows the lines in
flight, while the common megabyte lines and images still reuse heap memory
(a mapping per buffer costs page faults: pinned at 128 KiB, ReadMedia ran at
half speed). Both effects are measured by `scrollback bench`.

Memory freed below that threshold stays in the threads' heap arenas until
glibc trims them, which it does only for the main arena's top. `trim_soon`,
called when a stream ends, returns it with `malloc_trim` within a second, at
most once a second, off the event loop: what a departed client held goes back
to the OS even when no other traffic follows (measured by the stalled-client
figures of `scrollback bench`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
# Pinning the mmap threshold also stops glibc from raising the trim threshold
# with it; left at 128 KiB, every free trims the heap and the next allocation
# faults its pages in again.
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
_pinned = False
TRIM_DELAY_SECONDS = 1.0
# The loop a trim is scheduled on (None: none pending); a loop closed before its
# trim ran (a test's, a restarted server's) must not block later trims.
_trim_loop: asyncio.AbstractEventLoop | None = None


def pin_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at 4 MiB; True if done (once per process)."""
    global _pinned
    if _pinned:
        return True
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt): nothing to pin
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _pinned = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not _pinned:
        log.warning("could not pin the malloc mmap threshold")
    return _pinned


def _load_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _load_malloc_trim()
trims = 0  # how many trims ran (a real count, read by tests)


def _trim() -> None:
    global trims
    if _malloc_trim is not None:
        _malloc_trim(0)
        trims += 1


def _run_trim(loop: asyncio.AbstractEventLoop) -> None:
    global _trim_loop
    _trim_loop = None
    loop.run_in_executor(None, _trim)


def trim_soon() -> None:
    """Return freed heap memory to the OS within a second (once for a burst of calls).

    Called from the event loop when a stream ends; the trim runs in a thread.
    """
    global _trim_loop
    if _malloc_trim is None or (_trim_loop is not None and not _trim_loop.is_closed()):
        return
    loop = asyncio.get_running_loop()
    _trim_loop = loop
    loop.call_later(TRIM_DELAY_SECONDS, _run_trim, loop)
