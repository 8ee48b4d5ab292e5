"""A buffered, seekable file over a `read(offset, length)` function.

What reads an image's header (scrollback.contract.image_header) or decodes it
(scrollback.imaging) needs a file; an image inside a transcript line has only
a reader that decodes slices of its payload (scrollback.contract.extraction's
PayloadReader), and a blob a ranged read of its open file. This wraps either,
so the image is read slice by slice, never held whole.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO

# Reads of the source are of this size (the buffer of the file given out).
READ_BUFFER = 64 * 1024


class ReaderStream(io.RawIOBase):
    """A read-only, seekable file over `read(offset, length)` of `size` bytes."""

    def __init__(self, read: Callable[[int, int], bytes], size: int) -> None:
        super().__init__()
        self._read = read
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self._size - self._position)
        if wanted <= 0:
            return 0
        data = self._read(self._position, wanted)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


def buffered(read: Callable[[int, int], bytes], size: int) -> IO[bytes]:
    """A buffered, seekable file over `read(offset, length)`."""
    return io.BufferedReader(ReaderStream(read, size), buffer_size=READ_BUFFER)
