"""Gemini CLI sessions as the lines of their live messages (docs/contract.md §1, "Gemini").

Gemini CLI appends to its session file (`session-*.jsonl`): a header line,
one line per version of a message (`{"id": ..., ...}`: an id written again
replaces the earlier version, as an assistant turn is rewritten while it
streams), `{"$set": {...}}` metadata updates (a `$set` of `messages` is a
checkpoint: the list of messages is replaced by the one given) and
`{"$rewindTo": id}` (that message and every later one are dropped). This
follows gemini-cli's own reader (`loadConversationRecord` in
packages/core/src/services/chatRecordingService.ts): the messages are a map
from id to the latest version, in the order an id was first set since the last
clear; a rewind to an id that is not there clears them all.

`LiveScan` reads the complete lines of a file once, forward, and keeps, per
line or per element of a checkpoint's `messages` array, its byte span and
whether it is live; a later line may kill an earlier span, never revive one.
It is extended from where it stopped as the file grows, so a request reads
only what was appended since the last one (`scan_of`, one scan per file per
process).

`LiveView` is the `ByteSource` the services read a Gemini session through: a
blank line of `PREFIX_BYTES` (so the first bytes, which name a file version,
never change), then the file's complete lines with every byte outside a live
span turned into a space, and a newline written before each checkpoint
element, so each live message is one line of its own, as it was written. Blank
lines are skipped by every reader, so a window, a media lookup, the line
index, search and insight see exactly the live messages, at offsets that stay
put while the file only grows. A message superseded since a page was served
turns blank where it was (the reader skips it); a `$rewindTo` or a checkpoint
moves or removes many, so it starts a new generation: the view's inode is
mixed with the generation, and an old page token, a watch position or an index
row of the previous generation is refused as for a rewritten file
(TRANSCRIPT_REWRITTEN).
"""

from __future__ import annotations

import bisect
import re
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
import xxhash

from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line
from scrollback.linefile import ByteSource, SourceStat

# The blank line the view starts with: as long as the bytes that name a file version.
PREFIX_BYTES = 4096
_PREFIX = b" " * (PREFIX_BYTES - 1) + b"\n"
# A line is classified by its first member, read from this many bytes of its head.
HEAD_READ = 512
# A line whose first member says nothing is parsed whole only up to this size.
PARSE_MAX = 1024 * 1024
# Lines are found in reads of this size.
SCAN_CHUNK = 4 * 1024 * 1024
# The largest older whole-document session served (it is read whole to find its messages).
LEGACY_MAX = 256 * 1024 * 1024
# Scans kept per process (the least recently used go first).
SCANS_KEPT = 256
_FIRST_KEY = re.compile(rb'\s*\{\s*"((?:[^"\\]|\\.){0,64})"\s*:\s*')
_SIMPLE_STRING = re.compile(rb'"((?:[^"\\]|\\.){0,256})"')
# JSON tokens the structure walk needs: strings (whole) and punctuation.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]')
# How a user message's type reads in its head (gemini-cli writes it after `id` and `timestamp`).
_USER_TYPE = re.compile(rb'"type"\s*:\s*"user"')
# The metadata a header or a `$set` may carry that a listing shows.
_METADATA_KEYS = ("sessionId", "startTime", "lastUpdated", "summary", "kind", "projectHash")


@dataclass(frozen=True, slots=True)
class LiveStat:
    """A view's stat: the file's, with the view's size and the generation in its inode."""

    st_size: int
    st_dev: int
    st_ino: int
    st_mtime_ns: int
    st_ctime_ns: int


def _json_string(raw: bytes) -> str | None:
    try:
        value = orjson.loads(b'"' + raw + b'"')
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def checkpoint_elements(data: bytes, path: tuple[str, ...]) -> list[tuple[int, int]] | None:
    """(start, end) of every object element of the array at `path` (member names from the
    top-level object) in the JSON text `data`; None when there is no such array.

    A walk over the text's strings and punctuation: payload strings are one token,
    so a checkpoint full of images is not parsed to find its elements.
    """
    stack: list[str] = []  # "{" or "[" per open container
    keys: list[str | None] = []  # the member being read in each open object
    pending_key: str | None = None
    elements: list[tuple[int, int]] | None = None
    element_start = -1
    array_depth = -1
    expect_key = False
    for match in _TOKEN.finditer(data):
        token = match.group()
        first = token[:1]
        if first == b'"':
            if expect_key and stack and stack[-1] == "{":
                pending_key = _json_string(token[1:-1])
            continue
        if first == b":":
            if keys:
                keys[-1] = pending_key
            expect_key = False
            continue
        if first in (b"{", b"["):
            if array_depth >= 0 and len(stack) == array_depth and first == b"{":
                element_start = match.start()
            here = tuple(k or "" for k in keys)
            stack.append(first.decode())
            keys.append(None)
            expect_key = first == b"{"
            if first == b"[" and here == path and elements is None:
                elements, array_depth = [], len(stack)
            continue
        if first in (b"}", b"]"):
            if not stack:
                return elements
            stack.pop()
            keys.pop()
            if array_depth >= 0 and len(stack) == array_depth and first == b"}":
                if elements is not None and element_start >= 0:
                    elements.append((element_start, match.end()))
                element_start = -1
            if first == b"]" and len(stack) == array_depth - 1:
                array_depth = -1
            continue
        if first == b",":
            expect_key = bool(stack) and stack[-1] == "{"
    return elements


@dataclass(slots=True)
class _Spans:
    """Every span the scan classified, in file order: live or dead, and the breaks."""

    starts: array[int]
    ends: array[int]
    alive: bytearray
    flatten: bytearray  # 1: the span's newlines are read as spaces (a pretty-printed element)
    breaks: array[int]  # offsets read as a newline (before a checkpoint's elements)

    @classmethod
    def empty(cls) -> _Spans:
        return cls(array("q"), array("q"), bytearray(), bytearray(), array("q"))

    def add(self, start: int, end: int, alive: bool, flatten: bool = False) -> int:
        self.starts.append(start)
        self.ends.append(end)
        self.alive.append(1 if alive else 0)
        self.flatten.append(1 if flatten else 0)
        return len(self.starts) - 1


class LiveScan:
    """What a Gemini session's lines say so far: which spans are live, and its metadata.

    `covered` is where the complete lines classified end; `generation` counts
    the rewinds and checkpoints met (each may move or drop messages already
    served). Extend it with `extend` (under its lock: `scan_of` does).
    """

    def __init__(self, dev: int, ino: int, legacy: bool = False) -> None:
        self.dev, self.ino, self.legacy = dev, ino, legacy
        self.head = b""  # the first bytes of the first line, once it is complete
        self.lock = threading.Lock()
        self.covered = 0
        self.generation = 0
        self.spans = _Spans.empty()
        self.live: dict[str, int] = {}  # id -> span index, in gemini-cli's order
        self.metadata: dict[str, Any] = {}
        self.first_user_text = ""
        self.mark = b""  # the last bytes before `covered`, checked before extending

    # -- classifying lines -------------------------------------------------------

    def extend(self, source: ByteSource, size: int) -> None:
        """Classify the complete lines between `covered` and `size`."""
        if self.legacy:
            self._document(source, size)
            return
        position = line_start = self.covered
        while position < size:
            chunk = source.read(min(SCAN_CHUNK, size - position), position)
            if not chunk:
                break
            at = 0
            while (newline := chunk.find(b"\n", at)) >= 0:
                if line_start >= position:
                    self._line(chunk, line_start - position, newline, position)
                else:  # begun in an earlier chunk: read again, its head at least, never joined
                    self._long_line(source, line_start, position + newline)
                line_start = position + newline + 1
                self.covered = line_start
                at = newline + 1
            position += len(chunk)
        if self.covered:
            start = max(0, self.covered - 64)
            self.mark = source.read(self.covered - start, start)

    def _long_line(self, source: ByteSource, start: int, end: int) -> None:
        """Classify a line that spans reads: from its head, the whole line only when it must
        be parsed (at most PARSE_MAX, a `$set`, the first user message's text)."""
        head = source.read(min(HEAD_READ, end - start), start)
        match = _FIRST_KEY.match(head)
        key = _json_string(match.group(1)) if match is not None else None
        whole = key != "id" and (end - start <= PARSE_MAX or key == "$set")
        if key == "id" and not self.first_user_text and _USER_TYPE.search(head):
            whole = True
        if whole:
            line = source.read(end - start, start)
            self._line(line, 0, len(line), start)
            return
        if match is not None and key == "id":
            value = _SIMPLE_STRING.match(head, match.end())
            message_id = _json_string(value.group(1)) if value is not None else None
            if message_id is not None:
                self._message(message_id, start, end, head, 0, 0)
                return
        self.spans.add(start, end, False)

    def _line(self, data: bytes, start: int, stop: int, base: int) -> None:
        """Classify the line data[start:stop] (at `base + start` in the file)."""
        offset, end = base + start, base + stop
        if not self.head:
            self.head = data[start : min(stop, start + 64)]
        match = _FIRST_KEY.match(data, start, min(stop, start + HEAD_READ))
        key = _json_string(match.group(1)) if match is not None else None
        if match is not None and key == "id":
            value = _SIMPLE_STRING.match(data, match.end(), stop)
            message_id = _json_string(value.group(1)) if value is not None else None
            if message_id is not None:
                self._message(message_id, offset, end, data, start, stop)
                return
        if stop - start <= PARSE_MAX:
            line = data[start:stop]
            record = _parse(line)
            if record is not None and self._record(record, line, offset):
                return
        elif key == "$set":
            self._checkpoint(data[start:stop], offset, ("$set", "messages"))
            return
        self.spans.add(offset, end, False)

    def _document(self, source: ByteSource, size: int) -> None:
        """An older whole-document session (`session-*.json`): its `messages` are the entries.

        gemini-cli rewrote the file whole at each update, so a version is the whole
        file: it is read once, and any change of it is another version (`_fresh`).
        """
        if size > LEGACY_MAX:
            return  # not served: the document would be held whole to find its messages
        data = source.read(size, 0)
        self.head = data[:64]
        self._checkpoint(data, 0, ("messages",))
        self.covered = len(data)
        record = _parse(data) if len(data) <= PARSE_MAX else None
        if record is not None:
            self._metadata(record)

    def _record(self, record: dict[str, Any], line: bytes, offset: int) -> bool:
        """Classify a parsed line as gemini-cli does (rewind, message, `$set`, header)."""
        end = offset + len(line)
        rewind = record.get("$rewindTo")
        if isinstance(rewind, str):
            self.spans.add(offset, end, False)
            self._rewind(rewind)
            return True
        if isinstance(record.get("id"), str):
            self._message(record["id"], offset, end, line, 0, len(line))
            return True
        update = record.get("$set")
        if isinstance(update, dict):
            self._metadata(update)
            if isinstance(update.get("messages"), list):
                self._checkpoint(line, offset, ("$set", "messages"))
            else:
                self.spans.add(offset, end, False)
            return True
        if isinstance(record.get("sessionId"), str) and isinstance(record.get("projectHash"), str):
            self._metadata(record)
            self.spans.add(offset, end, False)
            return True
        return False

    def _metadata(self, record: dict[str, Any]) -> None:
        for key in _METADATA_KEYS:
            if key in record:
                self.metadata[key] = record[key]

    def _message(
        self, message_id: str, start: int, end: int, data: bytes, low: int, high: int
    ) -> None:
        """A message line (data[low:high]): its id's new latest version."""
        known = self.live.get(message_id)
        if known is not None:
            self.spans.alive[known] = 0
        self.live[message_id] = self.spans.add(start, end, True)
        if not self.first_user_text and _USER_TYPE.search(data, low, min(high, low + HEAD_READ)):
            self.first_user_text = _user_text(data[low:high])

    def _rewind(self, message_id: str) -> None:
        """Drop that message and all after it in order; all of them when it is not there."""
        self.generation += 1
        ids = list(self.live)
        cut = ids.index(message_id) if message_id in self.live else 0
        for dropped in ids[cut:]:
            self.spans.alive[self.live.pop(dropped)] = 0

    def _checkpoint(self, line: bytes, offset: int, path: tuple[str, ...]) -> None:
        """Replace the messages by the elements of the array at `path`, each a line of its own."""
        elements = checkpoint_elements(line, path)
        end = offset + len(line)
        if elements is None:
            self.spans.add(offset, end, False)
            return
        self.generation += 1
        for index in self.live.values():
            self.spans.alive[index] = 0
        self.live = {}
        previous = offset
        for k, (start, stop) in enumerate(elements):
            self.spans.add(previous, offset + start, False)
            # A newline ends the previous element and one starts this one: each is a line
            # of its own, with no spaces before it (the gap between them a blank line).
            if k and offset + start - previous >= 2:
                self.spans.breaks.append(previous)
            if offset + start > previous:
                self.spans.breaks.append(offset + start - 1)
            head = _FIRST_KEY.match(line, start, min(stop, start + HEAD_READ))
            message_id = None
            if head is not None and _json_string(head.group(1)) == "id":
                value = _SIMPLE_STRING.match(line, head.end())
                message_id = _json_string(value.group(1)) if value is not None else None
            element = line[start:stop]
            if message_id is None:
                parsed = _parse(element) if len(element) <= PARSE_MAX else None
                found = parsed.get("id") if parsed is not None else None
                message_id = found if isinstance(found, str) else None
            flatten = b"\n" in element
            if message_id is None:
                self.spans.add(offset + start, offset + stop, False)
            else:
                known = self.live.get(message_id)
                if known is not None:
                    self.spans.alive[known] = 0
                self.live[message_id] = self.spans.add(offset + start, offset + stop, True, flatten)
                if not self.first_user_text and _USER_TYPE.search(element, 0, HEAD_READ):
                    self.first_user_text = _user_text(element)
            previous = offset + stop
        self.spans.add(previous, end, False)
        if elements:
            self.spans.breaks.append(previous)

    # -- reading -----------------------------------------------------------------

    def masks(self, offset: int, stop: int) -> bool:
        """True if some byte of the file's [offset, stop) reads otherwise in the view."""
        spans = self.spans
        index = bisect.bisect_right(spans.ends, offset)
        count = len(spans.starts)
        while index < count and spans.starts[index] < stop:
            if not spans.alive[index] or spans.flatten[index]:
                return True
            index += 1
        first = bisect.bisect_left(spans.breaks, offset)
        return first < len(spans.breaks) and spans.breaks[first] < stop

    def mask(self, data: bytearray | memoryview, offset: int) -> None:
        """Turn `data` (the file's bytes at `offset`) into the view's: dead bytes to spaces."""
        spans, stop = self.spans, offset + len(data)
        index = bisect.bisect_right(spans.ends, offset)
        count = len(spans.starts)
        while index < count and spans.starts[index] < stop:
            low = max(spans.starts[index], offset) - offset
            high = min(spans.ends[index], stop) - offset
            if high > low:
                if not spans.alive[index]:
                    data[low:high] = b" " * (high - low)
                elif spans.flatten[index]:
                    flat = bytes(data[low:high]).replace(b"\n", b" ").replace(b"\r", b" ")
                    data[low:high] = flat
            index += 1
        first = bisect.bisect_left(spans.breaks, offset)
        for position in spans.breaks[first : bisect.bisect_left(spans.breaks, stop)]:
            data[position - offset] = 0x0A

    @property
    def view_ino(self) -> int:
        """The view's inode: the file's, mixed with its head and the generation (and, for a
        whole-document session, its size: each rewrite of it is another version)."""
        generation = self.covered if self.legacy else self.generation
        digest = xxhash.xxh3_64_intdigest(
            self.ino.to_bytes(8, "little") + generation.to_bytes(8, "little") + self.head
        )
        return digest & ((1 << 63) - 1)

    @property
    def title(self) -> str:
        """The session's summary when set, else its first user text."""
        summary = self.metadata.get("summary")
        if isinstance(summary, str) and summary.strip():
            return summary.strip()
        return self.first_user_text


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _user_text(line: bytes) -> str:
    """The text of a user message (its content string or text parts), else ""."""
    if len(line) > PARSE_MAX:
        stripped = strip_line(line, MIN_INLINE_LIMIT, PARSE_MAX)
        if stripped is None or stripped.oversize:
            return ""
        line = stripped.json
    record = _parse(line)
    if record is None or record.get("type") != "user":
        return ""
    content = record.get("content")
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(t for t in parts if isinstance(t, str)).strip()
    return ""


_SCANS: OrderedDict[tuple[int, int], LiveScan] = OrderedDict()
_SCANS_LOCK = threading.Lock()


def _fresh(scan: LiveScan, source: ByteSource, size: int) -> bool:
    """True if the file still continues what the scan read (same head, the mark in place);
    a whole-document session only while its size is the one read."""
    if scan.legacy and scan.covered and size != scan.covered:
        return False
    if size < scan.covered or source.read(len(scan.head), 0) != scan.head:
        return False
    start = scan.covered - len(scan.mark)
    return not scan.mark or source.read(len(scan.mark), start) == scan.mark


def scan_of(
    source: ByteSource, stat: SourceStat | None = None, *, legacy: bool = False
) -> LiveScan:
    """The scan of an open session file, extended to its complete lines now.

    One per file (device, inode) per process; a file that no longer continues
    what was scanned (its head or the bytes before `covered` changed, or it
    shrank) is scanned again from its start.
    """
    stat = source.stat() if stat is None else stat
    key = (stat.st_dev, stat.st_ino)
    with _SCANS_LOCK:
        scan = _SCANS.get(key)
        if scan is not None:
            _SCANS.move_to_end(key)
    if scan is None:
        scan = LiveScan(stat.st_dev, stat.st_ino, legacy)
        with _SCANS_LOCK:
            scan = _SCANS.setdefault(key, scan)
            while len(_SCANS) > SCANS_KEPT:
                _SCANS.popitem(last=False)
    with scan.lock:
        if not _fresh(scan, source, stat.st_size):
            scan = LiveScan(stat.st_dev, stat.st_ino, legacy)
            with _SCANS_LOCK:
                _SCANS[key] = scan
        if scan.covered < stat.st_size:
            scan.extend(source, stat.st_size)
        return scan


class LiveView(ByteSource):
    """A Gemini session file as the lines of its live messages (see the module's text).

    Owns the file's source. `stat` extends the scan first, so a view kept open
    sees appends as a file does.
    """

    __slots__ = ("_file", "legacy", "scan")
    # Lines turn blank in place while the version stays (a message rewritten later): what is
    # kept of the view's lines (the line index) is checked line by line, not by its last bytes.
    blanks_in_place = True

    def __init__(self, file: ByteSource, *, legacy: bool = False) -> None:
        self._file = file
        self.legacy = legacy
        self.scan = scan_of(file, legacy=legacy)

    def stat(self) -> LiveStat:
        """The view's size (prefix and complete lines) and the generation's inode."""
        stat = self._file.stat()
        self.scan = scan_of(self._file, stat, legacy=self.legacy)
        return LiveStat(
            PREFIX_BYTES + self.scan.covered,
            stat.st_dev,
            self.scan.view_ino,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
        )

    def read(self, length: int, offset: int) -> bytes:
        """The view's bytes [offset, offset + length), fewer at its end."""
        if length < 0 or offset < 0:
            raise ValueError("negative read")
        scan = self.scan
        end = min(offset + length, PREFIX_BYTES + scan.covered)
        if end <= offset:
            return b""
        head = b""
        if offset < PREFIX_BYTES:
            head = _PREFIX[offset : min(end, PREFIX_BYTES)]
            offset = PREFIX_BYTES
            if end <= offset:
                return head
        raw_offset = offset - PREFIX_BYTES
        raw = self._file.read(end - offset, raw_offset)
        with scan.lock:
            if not scan.masks(raw_offset, raw_offset + len(raw)):
                return head + raw if head else raw  # live bytes only: no copy
            data = bytearray(raw)
            scan.mask(data, raw_offset)
        return head + bytes(data)

    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int:
        """Copy the view's bytes into `buffer` from `offset`; the count, fewer at the end."""
        if offset < PREFIX_BYTES:
            data = self.read(len(buffer), offset)
            buffer[: len(data)] = data
            return len(data)
        scan = self.scan
        wanted = max(0, min(len(buffer), PREFIX_BYTES + scan.covered - offset))
        if wanted == 0:
            return 0
        raw_offset = offset - PREFIX_BYTES
        with memoryview(buffer) as view:
            target = view[:wanted]
            count = self._file.read_into(target, raw_offset)
            with scan.lock:
                if scan.masks(raw_offset, raw_offset + count):
                    scan.mask(target[:count], raw_offset)
        return count

    def dup(self) -> LiveView:
        """A second view on a second handle of the same file."""
        return LiveView(self._file.dup(), legacy=self.legacy)

    def close(self) -> None:
        """Close the file's source."""
        self._file.close()
