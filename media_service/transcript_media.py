"""Resolving a transcript image ref to its exact bytes (CONTRACT sections 2 and 4).

The entry's line is found by a bounded-chunk byte search for its top-level
`"uuid"` key (`"uuid":"<id>"`, whitespace allowed around the colon), never by
loading the file: the byte before the key's quote must be `{` or `,` (after
whitespace), and the line is then confirmed by parsing with the shared
`strip_line`, whose top-level uuid must be the one asked for (so a
parentUuid, a leafUuid, a nested object or text never matches). Only that one
line is read, and a line over the max line size is never loaded.

The image is then located, pin-checked and decoded with
`scrollback.contract.extraction`, the same enumeration code that minted the
ref. An LRU cache maps (file identity, entry uuid) to the line's offset, so
repeated reads of one transcript do not rescan it; a cached offset is
re-verified on every use.

Blocking I/O throughout: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from media_service.blobs import MediaInfo
from media_service.errors import (
    CorruptMediaError,
    LineTooLargeError,
    MediaNotFoundError,
    PinMismatchError,
)
from media_service.sniff import SNIFF_BYTES, sniff
from scrollback.contract.extraction import (
    ImageNotFoundError,
    ImageNotStrippedError,
    UndecodablePayloadError,
    decode_image,
    locate_image,
)
from scrollback.contract.refs import TranscriptImageRef, validate_pin
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line
from scrollback.transcripts import SessionNotFoundError, TranscriptRoot

SCAN_CHUNK = 1024 * 1024
_MAX_SPACE = 16
# Longest possible match: "uuid" + spaces + : + spaces + "<64 chars>".
_OVERLAP = 6 + _MAX_SPACE + 1 + _MAX_SPACE + 66
_WHITESPACE = b" \t\r\n"


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


def _preceded_by_object_start(fd: int, buf: bytes, index: int, buf_base: int) -> bool:
    """True if the first non-whitespace byte before buf[index] is `{` or `,`."""
    i = index - 1
    while i >= 0 and buf[i] in _WHITESPACE:
        i -= 1
    if i >= 0:
        return buf[i] in b"{,"
    # The key sits at the start of the buffer: look just before it in the file.
    absolute = buf_base + index
    back = min(absolute, 256)
    before = os.pread(fd, back, absolute - back).rstrip(_WHITESPACE)
    return bool(before) and before[-1] in b"{,"


def _line_end(fd: int, start: int, search_from: int, max_line_size: int) -> int | None:
    """The offset of the newline (or EOF) ending the line at `start`; None if oversize."""
    position = search_from
    while position - start <= max_line_size:
        block = os.pread(fd, SCAN_CHUNK, position)
        if not block:
            return position  # an unterminated last line
        newline = block.find(b"\n")
        if newline >= 0:
            end = position + newline
            return end if end - start <= max_line_size else None
        position += len(block)
    return None


def iter_candidate_lines(fd: int, entry_uuid: str, max_line_size: int) -> Iterator[Candidate]:
    """Every line with a `"uuid"` key equal to `entry_uuid` preceded by `{` or `,`.

    Reads the file in SCAN_CHUNK blocks with an overlap for matches across
    block boundaries; each candidate line is yielded once.
    """
    pattern = uuid_key_pattern(entry_uuid)
    tail = b""
    read_at = 0
    line_start_carry = 0  # start of the line in effect at `read_at`
    done_until = -1  # candidate lines already yielded end before this offset
    oversize_start = -1
    while True:
        chunk = os.pread(fd, SCAN_CHUNK, read_at)
        if not chunk:
            return
        buf = tail + chunk
        buf_base = read_at - len(tail)
        for match in pattern.finditer(buf):
            if match.end() <= len(tail):
                continue  # found in the previous block already
            at = buf_base + match.start()
            if at < done_until:
                continue
            newline = buf.rfind(b"\n", 0, match.start())
            start = buf_base + newline + 1 if newline >= 0 else line_start_carry
            if start == oversize_start:
                continue
            if not _preceded_by_object_start(fd, buf, match.start(), buf_base):
                continue
            end = _line_end(fd, start, buf_base + match.end(), max_line_size)
            if end is None:
                oversize_start = start
                yield Candidate(start, None)
                continue
            done_until = end
            yield Candidate(start, os.pread(fd, end - start, start))
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            line_start_carry = read_at + newline + 1
        read_at += len(chunk)
        tail = buf[-_OVERLAP:]


def _line_at(fd: int, start: int, length: int) -> bytes | None:
    """The whole line at a cached offset, or None if the file no longer has it there."""
    if start > 0 and os.pread(fd, 1, start - 1) != b"\n":
        return None
    data = os.pread(fd, length + 1, start)
    if len(data) < length or b"\n" in data[:length]:
        return None
    if len(data) == length + 1 and data[length:] != b"\n":
        return None
    return data[:length]


class LineOffsetCache:
    """LRU of (device, inode, entry uuid) -> (line offset, line length)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[int, int, str], tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int, str]) -> tuple[int, int] | None:
        """The cached span, freshened; or None."""
        with self._lock:
            span = self._entries.get(key)
            if span is not None:
                self._entries.move_to_end(key)
            return span

    def put(self, key: tuple[int, int, str], span: tuple[int, int]) -> None:
        """Remember a span, evicting the least recently used."""
        if self._capacity == 0:
            return
        with self._lock:
            self._entries[key] = span
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def discard(self, key: tuple[int, int, str]) -> None:
        """Forget a span that no longer holds."""
        with self._lock:
            self._entries.pop(key, None)


class _Outcome:
    """What the candidate lines said, for the error when none serves."""

    def __init__(self) -> None:
        self.pin_mismatch = False
        self.oversize = False


class TranscriptMedia:
    """Transcript image refs -> metadata and exact bytes."""

    def __init__(
        self, root: TranscriptRoot, *, max_line_size: int, cache_entries: int = 4096
    ) -> None:
        self._root = root
        self._max_line_size = max_line_size
        self.cache = LineOffsetCache(cache_entries)

    def _try_line(
        self, line: bytes, ref: TranscriptImageRef, pin: str, outcome: _Outcome
    ) -> tuple[MediaInfo, bytes] | None:
        stripped = strip_line(line, inline_limit=MIN_INLINE_LIMIT, max_line_size=len(line) + 1)
        if stripped is None or stripped.uuid != ref.entry_uuid:
            return None
        try:
            located = locate_image(line, ref.index)
        except ImageNotFoundError:
            return None
        except ImageNotStrippedError:
            outcome.pin_mismatch = True
            return None
        if located.pin != pin:
            outcome.pin_mismatch = True
            return None
        try:
            data = decode_image(line, located)
        except UndecodablePayloadError:
            raise CorruptMediaError("the transcript's payload is not valid base64") from None
        sniffed = sniff(data[:SNIFF_BYTES])
        info = MediaInfo(
            content_type=sniffed.content_type,
            declared_media_type=located.declared_media_type,
            size_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            safe_inline=sniffed.safe_inline,
            pin=located.pin,
        )
        return info, data

    def read(self, ref: TranscriptImageRef, pin: str) -> tuple[MediaInfo, bytes]:
        """The image's metadata and decoded bytes.

        MediaNotFoundError (unknown session/entry/index, failed upload),
        PinMismatchError, LineTooLargeError, CorruptMediaError,
        AmbiguousSessionError, RefError.
        """
        validate_pin(pin)
        try:
            transcript = self._root.resolve(ref.session_id)
            handle = self._root.open(transcript)
        except SessionNotFoundError:
            raise MediaNotFoundError() from None
        with handle:
            fd = handle.fileno()
            stat = os.fstat(fd)
            key = (stat.st_dev, stat.st_ino, ref.entry_uuid)
            outcome = _Outcome()
            cached = self.cache.get(key)
            if cached is not None:
                line = _line_at(fd, *cached)
                found = None if line is None else self._try_line(line, ref, pin, outcome)
                if found is not None:
                    return found
                self.cache.discard(key)
                outcome = _Outcome()
            for candidate in iter_candidate_lines(fd, ref.entry_uuid, self._max_line_size):
                if candidate.line is None:
                    outcome.oversize = True
                    continue
                found = self._try_line(candidate.line, ref, pin, outcome)
                if found is not None:
                    self.cache.put(key, (candidate.start, len(candidate.line)))
                    return found
        if outcome.pin_mismatch:
            raise PinMismatchError()
        if outcome.oversize:
            raise LineTooLargeError()
        raise MediaNotFoundError()
