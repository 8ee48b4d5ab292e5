"""Process memory settings for servers that handle megabyte-sized lines.

glibc serves allocations over its mmap threshold (128 KiB) with their own
mappings, returned to the OS when freed, but it raises that threshold to the
size of any such block once freed. After the first 10 MB image line, every
later one then comes from the threads' heap arenas, which keep the memory:
the peak RSS grows with image size times worker threads. Pinning the threshold
keeps each line's buffer a mapping of its own, so memory follows the lines in
flight (measured by `scrollback bench`: history peak RSS with 10 MB images).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 128 * 1024
_pinned = False


def pin_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at 128 KiB; True if done (once per process)."""
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
    _pinned = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not _pinned:
        log.warning("could not pin the malloc mmap threshold")
    return _pinned
