"""The uuid scan: the lines of a transcript holding a top-level `"uuid"` key with a given value.

The last step of finding an entry's line (media_service.entry_locator), and
StatMedia's one pass for many entries of one transcript:

- `iter_candidate_lines` looks for one id: a bounded-chunk byte search for the
  quoted value `"<id>"` (`bytes.find`), each hit confirmed as a `"uuid"` key by
  a small anchored regex over the bytes just before it (`"uuid"`, whitespace
  allowed around the colon), the byte before the key's quote being `{` or `,`
  (after whitespace);
- `iter_candidate_lines_many` looks for a set of ids in one pass: every
  `"uuid"` key is found with `bytes.find` and its value looked up in the set.

A candidate is only a candidate: the caller parses the line with the shared
stripper, whose top-level uuid must be the one asked for (so a parentUuid, a
leafUuid, a nested object or text never matches). The two scanners frame
lines themselves; they are kept together here so that moving them onto the
shared line walker changes this module only.

Blocking I/O: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from scrollback.linefile import ByteSource, LineFile

SCAN_CHUNK = 1024 * 1024
_MAX_SPACE = 16
# The longest `"uuid"<spaces>:<spaces>` before a value.
_KEY_REACH = 6 + _MAX_SPACE + 1 + _MAX_SPACE
_KEY_WINDOW = 48
# A `"uuid"` key ending exactly where the quoted value starts (used with endpos = the hit).
_KEY_BEFORE = re.compile(rb'"uuid"[ \t\r\n]{0,%d}:[ \t\r\n]{0,%d}\Z' % (_MAX_SPACE, _MAX_SPACE))
_WHITESPACE = b" \t\r\n"
# A top-level-looking `"uuid"` key and its id value (ids per docs/contract.md §4).
_KEY_AND_ID = re.compile(
    rb'"uuid"[ \t\r\n]{0,%d}:[ \t\r\n]{0,%d}"([A-Za-z0-9_-]{1,64})"' % (_MAX_SPACE, _MAX_SPACE)
)
# The longest match of _KEY_AND_ID: kept over from one slice to the next.
_KEY_AND_ID_REACH = _KEY_REACH + 66


def uuid_key_pattern(entry_uuid: str) -> re.Pattern[bytes]:
    """The bytes of a `"uuid"` key with this value, any JSON spacing up to a bound."""
    return re.compile(
        rb'"uuid"[ \t\r\n]{0,%d}:[ \t\r\n]{0,%d}"%s"'
        % (_MAX_SPACE, _MAX_SPACE, re.escape(entry_uuid.encode("ascii")))
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A line holding a `"uuid"` key with the value asked for; `line` is None if oversize."""

    start: int
    line: bytes | None


def _preceded_by_object_start(fd: ByteSource, buf: bytearray, index: int, buf_base: int) -> bool:
    """True if the first non-whitespace byte before buf[index] is `{` or `,`."""
    i = index - 1
    while i >= 0 and buf[i] in _WHITESPACE:
        i -= 1
    if i >= 0:
        return buf[i] in b"{,"
    # The key sits at the start of the buffer: look just before it in the file.
    absolute = buf_base + index
    back = min(absolute, 256)
    before = LineFile(fd).read(back, absolute - back).rstrip(_WHITESPACE)
    return bool(before) and before[-1] in b"{,"


def iter_candidate_lines(
    fd: ByteSource, entry_uuid: str, max_line_size: int, start: int = 0
) -> Iterator[Candidate]:
    """Every line from `start` (a line start) with a `"uuid"` key equal to `entry_uuid`
    preceded by `{` or `,`.

    Reads the file in SCAN_CHUNK blocks into one reused buffer, keeping an
    overlap for matches across block boundaries, and looks for the quoted
    value with `bytes.find`; only a hit is checked for the key before it.
    Each candidate line is yielded once.
    """
    needle = b'"' + entry_uuid.encode("ascii") + b'"'
    chunk_size = SCAN_CHUNK
    overlap = _KEY_REACH + len(needle)
    buffer = bytearray(overlap + chunk_size)
    view = memoryview(buffer)
    kept = 0  # overlap bytes from the previous block, at the buffer's front
    read_at = start
    line_start_carry = start  # start of the line in effect at `read_at`
    done_until = -1  # candidate lines already yielded end before this offset
    oversize_start = -1
    try:
        while True:
            count = LineFile(fd).read_into(view[kept : kept + chunk_size], read_at)
            if count == 0:
                return
            size = kept + count
            buf_base = read_at - kept
            # Hits ending inside the overlap were seen with the previous block.
            hit = buffer.find(needle, max(0, kept - len(needle) + 1), size)
            while hit >= 0:
                key = _KEY_BEFORE.search(buffer, max(0, hit - _KEY_WINDOW), hit)
                at = buf_base + hit
                if key is not None and at >= done_until:
                    key_start = key.start()
                    newline = buffer.rfind(b"\n", 0, key_start)
                    start = buf_base + newline + 1 if newline >= 0 else line_start_carry
                    if start != oversize_start and _preceded_by_object_start(
                        fd, buffer, key_start, buf_base
                    ):
                        end = LineFile(fd).line_end(start, max_line_size, at + len(needle))
                        if end is None:
                            oversize_start = start
                            yield Candidate(start, None)
                        else:
                            done_until = end
                            yield Candidate(start, LineFile(fd).read(end - start, start))
                hit = buffer.find(needle, hit + 1, size)
            newline = buffer.rfind(b"\n", kept, size)
            if newline >= 0:
                line_start_carry = buf_base + newline + 1
            read_at += count
            keep = min(overlap, size)
            buffer[:keep] = buffer[size - keep : size]
            kept = keep
    finally:
        view.release()


def iter_candidate_lines_many(
    fd: ByteSource, wanted: frozenset[str], max_line_size: int, on_slice: Callable[[], None]
) -> Iterator[tuple[str, Candidate]]:
    """(id, line) for every line with a `"uuid"` key whose value is in `wanted`.

    One pass over the file whatever the number of ids: each `"uuid"` key is
    found with `bytes.find`, its value read by an anchored regex and looked up
    in `wanted`; a hit is kept only when the key is preceded by `{` or `,`.
    `on_slice` runs before each slice is read (it raises to stop the pass).
    Each (id, line) is yielded once.
    """
    reach = _KEY_AND_ID_REACH
    buffer = bytearray(reach + SCAN_CHUNK)
    view = memoryview(buffer)
    kept = 0
    read_at = 0
    line_start_carry = 0  # start of the line in effect at the buffer's first byte
    seen: set[tuple[str, int]] = set()
    try:
        while True:
            on_slice()
            count = LineFile(fd).read_into(view[kept : kept + SCAN_CHUNK], read_at)
            size = kept + count
            buf_base = read_at - kept
            # Keys starting in the last `reach` bytes are looked at with the next slice.
            limit = size if count == 0 else size - reach
            hit = buffer.find(b'"uuid"', 0, max(limit, 0))
            while hit >= 0:
                match = _KEY_AND_ID.match(buffer, hit, size)
                if match is not None:
                    entry_id = match.group(1).decode("ascii")
                    if entry_id in wanted:
                        newline = buffer.rfind(b"\n", 0, hit)
                        start = buf_base + newline + 1 if newline >= 0 else line_start_carry
                        if (entry_id, start) not in seen and _preceded_by_object_start(
                            fd, buffer, hit, buf_base
                        ):
                            seen.add((entry_id, start))
                            end = LineFile(fd).line_end(
                                start, max_line_size, buf_base + match.end()
                            )
                            if end is None:
                                yield entry_id, Candidate(start, None)
                            else:
                                yield (
                                    entry_id,
                                    Candidate(start, LineFile(fd).read(end - start, start)),
                                )
                hit = buffer.find(b'"uuid"', hit + 1, max(limit, 0))
            if count == 0:
                return
            newline = buffer.rfind(b"\n", 0, max(limit, 0))
            if newline >= 0:
                line_start_carry = buf_base + newline + 1
            keep = size - max(limit, 0)
            buffer[:keep] = buffer[size - keep : size]
            kept = keep
            read_at += count
    finally:
        view.release()
