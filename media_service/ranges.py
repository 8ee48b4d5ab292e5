"""read_offset / read_limit as google.bytestream, for media of a known size."""

from __future__ import annotations

from media_service.errors import ReadRangeError


def byte_range(size: int, read_offset: int, read_limit: int) -> tuple[int, int]:
    """The [start, end) to send: an offset equal to the size sends nothing;
    a negative offset, one past the size or a negative limit is ReadRangeError;
    a limit of 0 means to the end.
    """
    if read_offset < 0:
        raise ReadRangeError("read_offset must not be negative")
    if read_offset > size:
        raise ReadRangeError("read_offset is past the end of the media")
    if read_limit < 0:
        raise ReadRangeError("read_limit must not be negative")
    end = size if read_limit == 0 else min(size, read_offset + read_limit)
    return read_offset, end
