"""The uuid scan: the lines of a transcript holding a top-level `"uuid"` key with a given value.

A Gemini CLI message is named by its `"id"` (docs/contract.md §2), so an `"id"`
key is a candidate wherever a `"uuid"` key is; the stripper's confirmation
decides which one names the entry.

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
leafUuid, a nested object or text never matches). Both scanners are finders
for the shared walker (scrollback.linewalk.find_key), which frames the lines:
a key with a newline between it and its value belongs to no line and is
passed over.

Blocking I/O: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from scrollback.linefile import ByteSource, LineFile
from scrollback.linewalk import find_key

SCAN_CHUNK = 1024 * 1024
_MAX_SPACE = 16
# The longest `"uuid"<spaces>:<spaces>` before a value.
_KEY_REACH = 6 + _MAX_SPACE + 1 + _MAX_SPACE
_KEY_WINDOW = 48
# A `"uuid"` key ending exactly where the quoted value starts (used with endpos = the hit).
_KEY_BEFORE = re.compile(
    rb'"(?:uu)?id"[ \t\r\n]{0,%d}:[ \t\r\n]{0,%d}\Z' % (_MAX_SPACE, _MAX_SPACE)
)
_WHITESPACE = b" \t\r\n"
# A top-level-looking `"uuid"` key and its id value (ids per docs/contract.md §4).
_KEY_AND_ID = re.compile(
    rb'"(?:uu)?id"[ \t\r\n]{0,%d}:[ \t\r\n]{0,%d}"([A-Za-z0-9_-]{1,64})"' % (_MAX_SPACE, _MAX_SPACE)
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

    The walker (`find_key`) reads the file in SCAN_CHUNK blocks; each block is
    searched for the quoted value with `bytes.find` and only a hit is checked
    for the key before it. Each candidate line is yielded once.
    """
    needle = b'"' + entry_uuid.encode("ascii") + b'"'

    def finder(
        buffer: bytearray, lo: int, hi: int, end: int, base: int
    ) -> Iterator[tuple[int, int, None]]:
        stop = min(end, hi + len(needle) - 1)
        hit = buffer.find(needle, lo, stop)
        while hit >= 0:
            key = _KEY_BEFORE.search(buffer, max(0, hit - _KEY_WINDOW), hit)
            if key is not None and _preceded_by_object_start(fd, buffer, key.start(), base):
                yield key.start(), base + hit + len(needle), None
            hit = buffer.find(needle, hit + 1, stop)

    found = find_key(
        fd,
        finder,
        max_line_size,
        start=start,
        chunk=SCAN_CHUNK,
        context=_KEY_WINDOW,
        reach=len(needle) - 1,
    )
    for line in found:
        yield Candidate(line.start, line.data)


def iter_candidate_lines_many(
    fd: ByteSource, wanted: frozenset[str], max_line_size: int, on_slice: Callable[[], None]
) -> Iterator[tuple[str, Candidate]]:
    """(id, line) for every line with a `"uuid"` key whose value is in `wanted`.

    One pass over the file whatever the number of ids (`find_key`): each
    `"uuid"` key is found with `bytes.find`, its value read by an anchored
    regex and looked up in `wanted`; a hit is kept only when the key is
    preceded by `{` or `,`. `on_slice` runs before each slice is read (it
    raises to stop the pass). Each (id, line) is yielded once.
    """

    def finder(
        buffer: bytearray, lo: int, hi: int, end: int, base: int
    ) -> Iterator[tuple[int, int, str]]:
        # `id"` ends both keys: one search finds `"uuid"` and `"id"` alike.
        hit = buffer.find(b'id"', lo, hi)
        while hit >= 0:
            key = hit - 3 if buffer[max(0, hit - 3) : hit] == b'"uu' else hit - 1
            match = _KEY_AND_ID.match(buffer, key, end) if key >= 0 else None
            if match is not None:
                entry_id = match.group(1).decode("ascii")
                if entry_id in wanted and _preceded_by_object_start(fd, buffer, key, base):
                    yield key, base + match.end(), entry_id
            hit = buffer.find(b'id"', hit + 1, hi)

    found = find_key(
        fd, finder, max_line_size, chunk=SCAN_CHUNK, reach=_KEY_AND_ID_REACH, on_slice=on_slice
    )
    for line in found:
        yield line.tag, Candidate(line.start, line.data)
