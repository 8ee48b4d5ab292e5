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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
# Pinning the mmap threshold also stops glibc from raising the trim threshold
# with it; left at 128 KiB, every free trims the heap and the next allocation
# faults its pages in again.
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
_pinned = False


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
