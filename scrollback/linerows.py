"""What the line index keeps of each line: its place, its top-level uuid, its image markers.

Lines held in memory (a chunk of the build, a feed's buffer) are indexed with
C-level scans of the whole buffer (`chunk_lines`): the `"uuid"` keys and the
`"type":"image"` markers are found in spans around each quote, the newlines by
the shared walker (scrollback.linewalk); only a line with several `"uuid"` keys
runs the top-level tokenizer. A line longer than a chunk is read for its uuid
from both ends and for its markers piece by piece (`long_line_entry`).
"""

from __future__ import annotations

import re

from scrollback.contract.text import indexable
from scrollback.contract.top_level import top_level_strings
from scrollback.linefile import ByteSource, LineFile
from scrollback.linewalk import newlines
from scrollback.state.line_index import IndexedLine

# After a quote, this many bytes are searched for markers before the next quote is looked for.
SPAN_BYTES = 4096
_SPACE = rb"[ \t\r\n]{0,16}"
# A `"uuid"` key with an id value (ids per docs/contract.md §4).
_KEY_AND_ID = re.compile(rb'"uuid"' + _SPACE + b":" + _SPACE + rb'"([A-Za-z0-9_-]{1,64})"')
# A `"type"` key ending where an `"image"` value starts (searched with endpos = the value).
_TYPE_BEFORE = re.compile(rb'"type"' + _SPACE + b":" + _SPACE + rb"\Z")
_TYPE_REACH = 6 + 16 + 1 + 16
_UUID_KEYS = frozenset({"uuid"})
_WHITESPACE = b" \t\r\x0b\x0c"


def _quoted_spans(data: bytes | bytearray, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of data[start:end] that cover every `"` (each span starts at one).

    Every marker the index looks for starts with a quote, and payloads hold
    none: a quote-free run (base64) is jumped with one memchr-speed `find`
    instead of being searched for each marker.
    """
    spans: list[tuple[int, int]] = []
    find = data.find
    position = start
    while position < end:
        quote = find(b'"', position, end)
        if quote < 0:
            break
        stop = min(quote + SPAN_BYTES, end)
        if spans and spans[-1][1] == quote:
            spans[-1] = (spans[-1][0], stop)
        else:
            spans.append((quote, stop))
        position = stop
    return spans


def _uuid_keys(
    buffer: bytearray, spans: list[tuple[int, int]], end: int
) -> list[tuple[int, bytes]]:
    """(offset, id) of each `"uuid"` key with an id value starting in the spans."""
    found: list[tuple[int, bytes]] = []
    find, match = buffer.find, _KEY_AND_ID.match
    for span_start, span_end in spans:
        hit = find(b'"uuid"', span_start, min(span_end + 5, end))
        while hit >= 0:
            matched = match(buffer, hit, end)
            if matched is not None:
                found.append((hit, matched.group(1)))
            hit = find(b'"uuid"', hit + 6, min(span_end + 5, end))
    return found


def _image_markers(
    data: bytes | bytearray, spans: list[tuple[int, int]], start: int, end: int
) -> list[int]:
    """Offsets of each `"type":"image"` member (any spacing) whose `"image"` starts in the spans."""
    found: list[int] = []
    find, before = data.find, _TYPE_BEFORE.search
    for span_start, span_end in spans:
        hit = find(b'"image"', span_start, min(span_end + 6, end))
        while hit >= 0:
            if before(data, max(start, hit - _TYPE_REACH), hit) is not None:
                found.append(hit)
            hit = find(b'"image"', hit + 7, min(span_end + 6, end))
    return found


def chunk_lines(buffer: bytearray, end: int, base: int) -> list[IndexedLine]:
    """The lines of buffer[:end] (which ends with a newline), at file offset `base`."""
    spans = _quoted_spans(buffer, 0, end)
    keys = _uuid_keys(buffer, spans, end)
    images = _image_markers(buffer, spans, 0, end)
    lines: list[IndexedLine] = []
    k = i = 0
    nk, ni = len(keys), len(images)
    start = 0
    for newline in newlines(buffer, 0, end):
        uuid: str | None = None
        first = k
        while k < nk and keys[k][0] < newline:
            k += 1
        if k - first == 1:
            uuid = keys[first][1].decode("ascii")
        elif k - first > 1:
            uuid = _top_level_uuid(buffer, start, newline)
        count = 0
        while i < ni and images[i] < newline:
            i += 1
            count += 1
        if newline > start and not _blank(buffer, start, newline):
            lines.append(IndexedLine(base + start, newline - start, uuid, count))
        start = newline + 1
    return lines


def _blank(buffer: bytearray, start: int, end: int) -> bool:
    """True for a line of whitespace only, which every reader skips (the index leaves it out:
    a Gemini session's view has one for each line that is no live message)."""
    return buffer[start] in _WHITESPACE and buffer[start:end].isspace()


def _top_level_uuid(buffer: bytearray, start: int, end: int) -> str | None:
    """The line's top-level uuid, read textually from both ends (bounded windows)."""
    view = memoryview(buffer)

    def read(offset: int, length: int) -> bytes:
        return bytes(view[start + offset : start + offset + length])

    return _kept_uuid(top_level_strings(read, end - start, _UUID_KEYS).get("uuid"))


def _kept_uuid(uuid: str | None) -> str | None:
    """A uuid as the index keeps it (scrollback.contract.text: the same on every backend)."""
    return None if uuid is None else indexable(uuid)


def long_line_entry(fd: ByteSource, chunk: int, start: int, end: int) -> IndexedLine:
    """A line longer than a chunk: uuid from its ends, image markers counted chunk by chunk."""

    def read(offset: int, length: int) -> bytes:
        return LineFile(fd).read(length, start + offset)

    uuid = _kept_uuid(top_level_strings(read, end - start, _UUID_KEYS).get("uuid"))
    count = 0
    position = start
    while position < end:
        # Each piece starts a little early, so a `"type":` cut by the previous
        # piece is seen; a marker is counted in the piece where `"image"` starts.
        back = min(_TYPE_REACH, position - start)
        data = LineFile(fd).read(back + min(chunk, end - position) + 6, position - back)
        limit = back + min(chunk, end - position)
        spans = _quoted_spans(data, 0, len(data))
        count += sum(1 for hit in _image_markers(data, spans, 0, len(data)) if back <= hit < limit)
        position += limit - back
    return IndexedLine(start, end - start, uuid, count)
