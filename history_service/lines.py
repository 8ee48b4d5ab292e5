"""Reading transcript lines by byte range, forwards and backwards, in bounded blocks.

Nothing here reads a file from its start to find a window: backward reads
start at the window's end and go back block by block until they met enough line
starts, so a window costs O(window), not O(file). A line longer than the max
line size is never held whole: the scan only looks for its newline and yields
it without data (the caller serves an oversize stub).

`serve_line` turns one raw line into what a window serves, through the
contract's `strip_line` (the only stripper).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from scrollback.contract.stripping import StrippedLine, oversize_stub, strip_line

BLOCK_BYTES = 256 * 1024
# A served entry's json up to this size goes whole into one Entry message
# (below gRPC's 4 MiB, with room for the entry's other fields).
ENTRY_JSON_FIT = 3 * 1024 * 1024 + 512 * 1024
# The size of each EntryJsonChunk part (and of Entry.json when chunked).
JSON_CHUNK_BYTES = 3 * 1024 * 1024


class MediaMode(IntEnum):
    """What happens to payloads (the proto's values)."""

    DEFERRED = 1
    INLINE = 2


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line's byte range (newline excluded) and its bytes, or None when oversize."""

    start: int
    end: int
    data: bytes | None
    terminated: bool

    @property
    def size(self) -> int:
        """The line's length in bytes, newline excluded."""
        return self.end - self.start

    @property
    def next_start(self) -> int:
        """Where the next line starts."""
        return self.end + 1 if self.terminated else self.end


@dataclass(frozen=True, slots=True)
class ServedLine:
    """One entry as served: the stripped line plus where it came from."""

    offset: int
    line_size: int
    stripped: StrippedLine
    payloads_deferred: bool


def iter_lines_forward(fd: int, start: int, end: int, max_line: int) -> Iterator[RawLine]:
    """Yield the lines in [start, end) in file order; the last may be unterminated."""
    buf = bytearray()
    buf_start = start  # file offset of buf[0]
    cursor = 0  # index in buf of the current line's start
    while True:
        newline = buf.find(b"\n", cursor)
        if newline >= 0:
            yield RawLine(buf_start + cursor, buf_start + newline, bytes(buf[cursor:newline]), True)
            cursor = newline + 1
            continue
        read_at = buf_start + len(buf)
        line_start = buf_start + cursor
        if read_at >= end:
            if read_at > line_start:
                yield RawLine(line_start, read_at, bytes(buf[cursor:]), False)
            return
        if read_at - line_start > max_line:
            # Oversize: find its newline without keeping its bytes.
            del buf[:]
            position = read_at
            found_at = -1
            rest = b""
            while position < end:
                chunk = os.pread(fd, min(BLOCK_BYTES, end - position), position)
                if not chunk:
                    end = position
                    break
                found = chunk.find(b"\n")
                if found >= 0:
                    found_at, rest = position + found, chunk[found + 1 :]
                    break
                position += len(chunk)
            if found_at < 0:
                yield RawLine(line_start, min(position, end), None, False)
                return
            yield RawLine(line_start, found_at, None, True)
            buf, buf_start, cursor = bytearray(rest), found_at + 1, 0
            continue
        del buf[:cursor]
        buf_start += cursor
        cursor = 0
        want = max(BLOCK_BYTES, len(buf))  # geometric growth for long lines
        chunk = os.pread(fd, min(want, end - read_at), read_at)
        if not chunk:
            end = read_at  # the file shrank under us: stop at what we have
            continue
        buf += chunk


def iter_lines_backward(fd: int, end: int, max_line: int) -> Iterator[RawLine]:
    """Yield the lines before `end` (0 or just after a newline), newest first."""
    if end <= 0:
        return
    buf = bytearray()
    buf_start = (
        end - 1
    )  # buf covers [buf_start, buf_start + len(buf)); the newline at end-1 excluded
    line_end = end - 1
    while line_end >= 0:
        newline = buf.rfind(b"\n", 0, line_end - buf_start)
        while newline < 0 and buf_start > 0:
            if line_end - buf_start > max_line:
                break
            want = max(BLOCK_BYTES, len(buf))
            read_from = max(0, buf_start - want)
            chunk = os.pread(fd, buf_start - read_from, read_from)
            buf[0:0] = chunk
            buf_start = read_from
            newline = buf.rfind(b"\n", 0, line_end - buf_start)
        if newline < 0 and buf_start > 0:
            # Oversize: find its start without keeping its bytes.
            del buf[:]
            position = buf_start
            line_start = 0
            while position > 0:
                read_from = max(0, position - BLOCK_BYTES)
                chunk = os.pread(fd, position - read_from, read_from)
                found = chunk.rfind(b"\n")
                if found >= 0:
                    line_start = read_from + found + 1
                    buf = bytearray(chunk[: found + 1])
                    buf_start = read_from
                    break
                position = read_from
            yield RawLine(line_start, line_end, None, True)
            line_end = line_start - 1
            continue
        line_start = buf_start + newline + 1
        if line_end - line_start > max_line:
            yield RawLine(line_start, line_end, None, True)
        else:
            yield RawLine(
                line_start, line_end, bytes(buf[newline + 1 : line_end - buf_start]), True
            )
        del buf[newline + 1 :]
        line_end = line_start - 1


def tail_start(fd: int, size: int) -> int:
    """The start of the file's unterminated last line, or `size` if it ends with a newline."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    position = size
    while position > 0:
        read_from = max(0, position - BLOCK_BYTES)
        chunk = os.pread(fd, position - read_from, read_from)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return read_from + found + 1
        position = read_from
    return 0


def is_blank(raw: RawLine) -> bool:
    """True for an empty or whitespace-only line (ignored, not counted)."""
    return raw.data is not None and (not raw.data or raw.data.isspace())


def serve_line(
    raw: RawLine, mode: MediaMode, inline_limit: int, max_line_size: int
) -> ServedLine | None:
    """Strip one non-blank line for serving; None if it is not a JSON object."""
    if raw.data is None or raw.size > max_line_size:
        stub = StrippedLine(
            json=oversize_stub(raw.size),
            uuid="",
            type="",
            timestamp="",
            images=(),
            failed_image_indexes=(),
            image_count=0,
            cut_count=0,
            oversize=True,
        )
        return ServedLine(raw.start, raw.size, stub, False)
    deferred = False
    if mode == MediaMode.INLINE and raw.size <= ENTRY_JSON_FIT:
        stripped = strip_line(raw.data, raw.size + 1, max_line_size)
    else:
        stripped = strip_line(raw.data, inline_limit, max_line_size)
        deferred = mode == MediaMode.INLINE and stripped is not None and stripped.cut_count > 0
    if stripped is None:
        return None
    return ServedLine(raw.start, raw.size, stripped, deferred)


def json_parts(json: bytes, part_bytes: int = JSON_CHUNK_BYTES) -> list[str]:
    """Split a json text into parts of at most `part_bytes`, on UTF-8 character boundaries."""
    if len(json) <= ENTRY_JSON_FIT:
        return [json.decode("utf-8", "replace")]
    parts: list[str] = []
    position = 0
    while position < len(json):
        cut = min(len(json), position + part_bytes)
        while cut < len(json) and cut > position and (json[cut] & 0xC0) == 0x80:
            cut -= 1
        parts.append(json[position:cut].decode("utf-8", "replace"))
        position = cut
    return parts
