"""A transcript held in memory, behind the `ByteSource` protocol of scrollback.linefile."""

from __future__ import annotations

from dataclasses import dataclass

from scrollback.linefile import ByteSource


@dataclass(frozen=True, slots=True)
class MemoryStat:
    """The stat of a MemorySource: its size, and the identity and times it was given."""

    st_size: int
    st_dev: int = 0
    st_ino: int = 0
    st_mtime_ns: int = 0
    st_ctime_ns: int = 0


class MemorySource(ByteSource):
    """A transcript held in memory (tests, and sources whose records are not a file's bytes).

    Reads see the bytes as they are at the time of the read: `append` and
    `replace` change them under open readers, as a writer changes a file.
    """

    __slots__ = ("_data", "_ino")

    def __init__(self, data: bytes = b"", ino: int = 0) -> None:
        self._data = bytes(data)
        self._ino = ino

    def read(self, length: int, offset: int) -> bytes:
        """The bytes [offset, offset + length), fewer at the end."""
        if length < 0 or offset < 0:
            raise ValueError("negative read")
        return self._data[offset : offset + length]

    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int:
        """Copy into `buffer` from `offset`; the count copied, fewer at the end."""
        data = self.read(len(buffer), offset)
        buffer[: len(data)] = data
        return len(data)

    def stat(self) -> MemoryStat:
        """The size now (device 0, the inode it was given)."""
        return MemoryStat(len(self._data), 0, self._ino)

    def dup(self) -> MemorySource:
        """The same bytes; the copy does not follow later changes."""
        return MemorySource(self._data, self._ino)

    def close(self) -> None:
        """Nothing to release."""

    def append(self, data: bytes) -> None:
        """Add bytes at the end, as a writer appends to a file."""
        self._data += data

    def replace(self, data: bytes, ino: int | None = None) -> None:
        """Rewrite the whole content (another inode when given, as a rename over the file)."""
        self._data = bytes(data)
        if ino is not None:
            self._ino = ino
