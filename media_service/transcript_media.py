"""Resolving a transcript image ref to its exact bytes (docs/contract.md §2 and §4).

The entry's line is found, in this order:

1. at the ref's line offset hint (the offset the history service saw the line
   at), if the caller has one: the offset must start a line, the line is read
   up to its newline with bounded reads (never past the max line size) and
   must parse with the top-level uuid asked for and the pin asked for;
2. at the offset remembered in an LRU cache keyed by (file identity, entry
   uuid), re-verified the same way;
3. at the offsets the persisted line index (scrollback.lineindex) gives for
   the uuid, re-verified the same way (extended as the file grows, rebuilt when
   it is rewritten; it survives a restart). A file whose index does not cover
   it is answered from the part built so far and the search below, from the
   end of that part, while the rest is built in the background: the first
   touch of a file costs O(the entry's position), not a whole-file build;
4. by a bounded-chunk byte search for the quoted value `"<id>"` (`bytes.find`),
   each hit confirmed as a top-level `"uuid"` key by a small anchored regex
   over the bytes just before it (`"uuid"`, whitespace allowed around the
   colon), the byte before the key's quote being `{` or `,` (after
   whitespace), then by parsing the line with the shared stripper, whose
   top-level uuid must be the one asked for (so a parentUuid, a leafUuid, a
   nested object or text never matches).

Many selectors into one transcript (StatMedia) are resolved together: the
hinted, cached and indexed ones first, then one pass over the file for all the rest
(`iter_candidate_lines_many`: every `"uuid"` key is found with `bytes.find`
and its value looked up in the set of wanted ids), checking between slices
whether the caller left or its deadline passed. `search_passes` and
`search_slices` count full-file passes and the slices they read.

A wrong, stale or hostile hint or cached offset only ever costs a search:
whatever either points at is verified exactly as a searched line is. Only the
one line is read; a line over 4 MiB (HOLD_LINE_BYTES), or over the max line
size, is never held: it is stripped streaming from the file
(`strip_line_streamed`), so a ref minted in a line of any size resolves.

Each line is stripped once by the same enumeration code that minted the ref,
and the image located and pin-checked. The image is never held whole: its
metadata (sha256, sniffed type, size) comes from one streaming decode pass,
cached per (file identity, entry uuid, index, pin) (the pin is a hash of the
payload's raw text, so a line whose pin still matches decodes to the same
bytes), and reads decode slice by slice straight from the file
(`PayloadReader`).

Blocking I/O throughout: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from media_service.blobs import MediaInfo
from media_service.decoded import DecodedKey
from media_service.errors import (
    CorruptMediaError,
    LineTooLargeError,
    MediaNotFoundError,
    PinMismatchError,
    SearchCancelledError,
)
from media_service.lru import LruCache
from scrollback.contract.extraction import (
    ImageNotFoundError,
    ImageNotStrippedError,
    LocatedImage,
    PayloadReader,
    RawReader,
    UndecodablePayloadError,
    iter_decoded,
    locate_in_stripped,
    strip_for_extraction,
)
from scrollback.contract.image_header import header_dimensions
from scrollback.contract.refs import (
    TranscriptImageRef,
    has_usable_uuid,
    offset_of_entry_name,
    validate_pin,
)
from scrollback.contract.sniff import SNIFF_BYTES, sniff
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line_streamed
from scrollback.imaging import buffered
from scrollback.linefile import ByteSource, FileVersion, LineFile
from scrollback.lineindex import INDEX_UNAVAILABLE, LineIndex
from scrollback.principals import Principal
from scrollback.server import metrics
from scrollback.state.line_index import IndexedLine
from scrollback.transcripts import (
    SessionNotFoundError,
    Stamp,
    TranscriptFile,
    TranscriptSource,
    stamp_of,
)

SCAN_CHUNK = 1024 * 1024
# An index this close to the file's end is extended before a lookup answers.
CATCH_UP_BYTES = 8 * 1024 * 1024
# A candidate line up to this size is read whole to be stripped (fastest);
# a longer one is stripped streaming, so that no read holds a large line.
HOLD_LINE_BYTES = 4 * 1024 * 1024
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


# (file version, entry uuid) -> (line offset, line length)
LineOffsetCache = LruCache[tuple[FileVersion, str], tuple[int, int]]
# (file version, entry uuid, index, pin) -> metadata of the decoded bytes
MediaInfoCache = LruCache[tuple[FileVersion, str, int, str], MediaInfo]
# (file version, entry uuid, index, pin, line offset hint) -> where the image
# was found and verified, and the file's stamp then (scrollback.transcripts.stamp_of)
FoundCache = LruCache[tuple[FileVersion, str, int, str, int | None], tuple[Stamp, "_Found"]]


@dataclass(frozen=True, slots=True)
class OpenedPayload:
    """An image found and verified: metadata, a reader of its decoded bytes, its open file.

    `key` (file version, payload offset, pin) names its decoded bytes.
    """

    info: MediaInfo
    reader: PayloadReader
    handle: ByteSource
    key: DecodedKey


@dataclass(frozen=True, slots=True)
class _Found:
    """Image `located` of a line, with its payload's absolute offsets in the file."""

    located: LocatedImage
    raw_start: int
    raw_end: int
    escaped: bool


def _file_reader(fd: ByteSource) -> RawReader:
    def read(offset: int, length: int) -> bytes:
        return LineFile(fd).read(length, offset)

    return read


class _LineChanged(ValueError):
    """A line that shrank while it was read: read as not JSON, like any other broken line."""

    def __init__(self) -> None:
        super().__init__("the line changed while read")


def _has_backslash(fd: ByteSource, start: int, end: int) -> bool:
    position = start
    while position < end:
        block = LineFile(fd).read(min(SCAN_CHUNK, end - position), position)
        if not block:
            return False
        if b"\\" in block:
            return True
        position += len(block)
    return False


class _Outcome:
    """What the candidate lines said, for the error when none serves."""

    def __init__(self) -> None:
        self.other_line = False  # an offset-named entry's place holds another line
        self.pin_mismatch = False
        self.oversize = False


class TranscriptMedia:
    """Transcript image refs -> metadata and exact bytes."""

    def __init__(
        self,
        root: TranscriptSource,
        *,
        max_line_size: int,
        cache_entries: int = 4096,
        line_index: LineIndex | None = None,
    ) -> None:
        self._root = root
        self.line_index = line_index
        self._max_line_size = max_line_size
        self.cache = LineOffsetCache(cache_entries)
        self.infos = MediaInfoCache(cache_entries)
        self.found = FoundCache(cache_entries)
        # Full-file passes of stat_many and the slices they read (for tests and metrics).
        self.search_passes = 0
        self.search_slices = 0
        self._counts = threading.Lock()

    def close(self) -> None:
        """Close the line index's store."""
        if self.line_index is not None:
            self.line_index.close()

    def _index_key(self, transcript: TranscriptFile) -> str:
        """The transcript's name in the line index: its path under the root."""
        return self._root.key_of(transcript)

    def _indexed_lines(
        self, fd: ByteSource, key: str, uuids: Sequence[str]
    ) -> tuple[dict[str, list[IndexedLine]], int]:
        """Lines the index gives per uuid, and where the lines it does not cover start.

        A lookup costs O(the entry's position), not O(file): an index that
        does not cover the file answers from the part built so far, and the
        rest is built in the background while the caller searches the file
        from the end of that part (0 for a file never indexed). Only a few
        megabytes of growth are indexed before answering. A covering index
        gives 0: a search after it is the whole file's, as ever.
        """
        found: dict[str, list[IndexedLine]] = {}
        if self.line_index is None or not uuids:
            return found, 0
        index = self.line_index
        try:
            lines, covered, complete = index.lines_so_far(key, fd, uuids)
            if not complete and covered and fd.stat().st_size - covered <= CATCH_UP_BYTES:
                lines, covered, complete = index.lookup(key, fd, uuids), 0, True
        except INDEX_UNAVAILABLE:
            return found, 0  # the state store is busy: a search still finds the line
        if not complete:
            index.build_later(key, fd)
        for line in lines:
            if line.uuid is not None:
                found.setdefault(line.uuid, []).append(line)
        return found, 0 if complete else covered

    def _try_indexed(
        self, fd: ByteSource, indexed: IndexedLine, ref: TranscriptImageRef, pin: str, hold: int
    ) -> _Found | None:
        """The image if the indexed line is the entry (verified as a searched line is).

        The line must still start at its offset and end after its length; a
        long one is stripped streaming from the file, never held.
        """
        if indexed.length <= hold:
            line = LineFile(fd).line_at(indexed.offset, indexed.length, terminated=False)
            if line is None:
                return None
            return self._try_line(line, indexed.offset, ref, pin, _Outcome(), fd)
        if not LineFile(fd).starts_line(indexed.offset):
            return None
        if LineFile(fd).line_length(indexed.offset) != indexed.length:
            return None
        return self._try_line(None, indexed.offset, ref, pin, _Outcome(), fd)

    def _try_line(
        self,
        line: bytes | None,
        start: int,
        ref: TranscriptImageRef,
        pin: str,
        outcome: _Outcome,
        fd: ByteSource,
    ) -> _Found | None:
        """Where the image is if this line is the entry with the pin asked for; else None.

        `line` is the line's bytes, or None for a line over the max line size:
        that one is stripped by streaming it from the file, never held.
        """
        if line is not None:
            stripped = strip_for_extraction(line)
        else:
            size = LineFile(fd).line_length(start)
            stripped = strip_line_streamed(
                LineFile(fd).line_reader(start, size, _LineChanged),
                size,
                MIN_INLINE_LIMIT,
                self._max_line_size,
            )
            if stripped is not None and stripped.oversize:
                outcome.oversize = True  # too large even stripped: no ref was minted in it
                return None
        if stripped is None:
            return None
        offset = offset_of_entry_name(ref.entry_uuid)
        if offset is None:
            if stripped.uuid != ref.entry_uuid:
                return None
        elif start != offset or has_usable_uuid(stripped.uuid):
            outcome.other_line = True
            return None
        try:
            located = locate_in_stripped(stripped, ref.index)
        except ImageNotFoundError:
            return None
        except ImageNotStrippedError:
            outcome.pin_mismatch = True
            return None
        if located.pin != pin:
            outcome.pin_mismatch = True
            return None
        raw_start, raw_end = start + located.raw_start, start + located.raw_end
        if line is not None:
            escaped = line.find(b"\\", located.raw_start, located.raw_end) >= 0
        else:
            escaped = _has_backslash(fd, raw_start, raw_end)
        return _Found(located, raw_start, raw_end, escaped)

    def _info(
        self, fd: ByteSource, found: _Found, version: FileVersion, ref: TranscriptImageRef
    ) -> MediaInfo:
        """The decoded bytes' metadata: cached per pin, else one streaming pass over them."""
        located = found.located
        info_key = (version, ref.entry_uuid, ref.index, located.pin)
        info = self.infos.get(info_key)
        if info is None:
            digest = hashlib.sha256()
            head = b""
            size = 0
            try:
                for piece in iter_decoded(
                    _file_reader(fd), found.raw_start, found.raw_end, located.index
                ):
                    digest.update(piece)
                    if len(head) < SNIFF_BYTES:
                        head += piece[: SNIFF_BYTES - len(head)]
                    size += len(piece)
            except UndecodablePayloadError:
                raise CorruptMediaError("the transcript's payload is not valid base64") from None
            sniffed = sniff(head)
            width, height = 0, 0
            if sniffed.safe_inline:
                # The fixed header fields only, decoded slice by slice from the file.
                reader = PayloadReader(
                    _file_reader(fd),
                    found.raw_start,
                    found.raw_end,
                    escaped=found.escaped,
                    index=located.index,
                )
                try:
                    width, height = header_dimensions(buffered(reader.read, size)) or (0, 0)
                except (UndecodablePayloadError, ImageNotStrippedError):
                    raise CorruptMediaError("the transcript's payload changed while read") from None
            info = MediaInfo(
                content_type=sniffed.content_type,
                declared_media_type=located.declared_media_type,
                size_bytes=size,
                sha256=digest.hexdigest(),
                safe_inline=sniffed.safe_inline,
                pin=located.pin,
                width=width,
                height=height,
            )
            self.infos.put(info_key, info)
        if info.declared_media_type != located.declared_media_type:
            info = dataclasses.replace(info, declared_media_type=located.declared_media_type)
        return info

    def _locate(
        self,
        fd: ByteSource,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None,
        index_key: str = "",
    ) -> tuple[_Found, FileVersion]:
        """Find the entry's line in the open transcript and the image in it.

        An image found while the file had settled is found again without
        reading the line, for as long as the file keeps that stamp: nothing in
        it can have changed (scrollback.transcripts.stamp_of).
        """
        stat = fd.stat()  # before any byte is read: a write after it changes the stamp
        version = FileVersion.of(fd, stat)
        stamp = stamp_of(stat)
        found_key = (version, ref.entry_uuid, ref.index, pin, line_offset_hint)
        if stamp is not None:
            known = self.found.get(found_key)
            if known is not None and known[0] == stamp:
                return known[1], version
        found = self._find(fd, version, stat.st_size, ref, pin, line_offset_hint, index_key)
        if stamp is not None:
            self.found.put(found_key, (stamp, found))
        return found, version

    def _find(
        self,
        fd: ByteSource,
        version: FileVersion,
        size: int,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None,
        index_key: str,
    ) -> _Found:
        """`_locate`'s search: the hint, the cached offset, the line index, then the file.

        `stat_many` asks in the same order, the file's search made once for all
        the selectors the others leave (`_search_many`).
        """
        found = self._at_known_place(fd, version, ref, pin, line_offset_hint, size)
        scan_from = 0
        if found is None and index_key:
            indexed, scan_from = self._indexed_lines(fd, index_key, [ref.entry_uuid])
            found = self._in_indexed(fd, version, ref, pin, indexed.get(ref.entry_uuid, []))
        if found is not None:
            return found
        key = (version, ref.entry_uuid)
        outcome = _Outcome()
        # Longer lines are never held: they are stripped streaming from the file.
        hold = min(self._max_line_size, HOLD_LINE_BYTES)
        candidates = iter_candidate_lines(fd, ref.entry_uuid, hold, scan_from)
        if scan_from:
            # Past the part indexed so far first; the part before it only if the
            # entry is not there (an index is a list of candidates, not the truth).
            candidates = itertools.chain(candidates, iter_candidate_lines(fd, ref.entry_uuid, hold))
        for candidate in candidates:
            found = self._try_line(candidate.line, candidate.start, ref, pin, outcome, fd)
            if found is not None:
                if candidate.line is not None:
                    self.cache.put(key, (candidate.start, len(candidate.line)))
                return found
        if outcome.pin_mismatch:
            metrics.PIN_MISMATCHES.inc()
            raise PinMismatchError()
        if outcome.oversize:
            raise LineTooLargeError()
        raise MediaNotFoundError()

    def _open(
        self, principal: Principal | None, ref: TranscriptImageRef, pin: str
    ) -> tuple[ByteSource, str]:
        validate_pin(pin)
        try:
            transcript = self._root.resolve(ref.session_id, principal)
            return self._root.open(transcript), self._index_key(transcript)
        except SessionNotFoundError:
            raise MediaNotFoundError() from None

    def open(
        self,
        principal: Principal | None,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None = None,
    ) -> tuple[MediaInfo, PayloadReader, ByteSource]:
        """The image's metadata, a reader of its decoded bytes, and the file it reads.

        `principal` is the caller (None without auth): a session it may not
        see is MediaNotFoundError.

        The caller closes the file. Nothing of the image is held: each read
        decodes just the bytes asked for from the file (which stays the one
        version the ref was checked against while open). `line_offset_hint`
        is where the entry's line is believed to start; it is tried first and
        is only ever a hint. MediaNotFoundError (unknown session/entry/index,
        failed upload), PinMismatchError, LineTooLargeError (a line too large
        even stripped), CorruptMediaError, AmbiguousSessionError, RefError.
        """
        opened = self.open_payload(principal, ref, pin, line_offset_hint)
        return opened.info, opened.reader, opened.handle

    def open_payload(
        self,
        principal: Principal | None,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None = None,
    ) -> OpenedPayload:
        """`open`, with the key that names this payload's decoded bytes (media_service.decoded).

        The key is (file version, payload offset, pin) of the line as just
        verified, so it names bytes only a verified line can lead to.
        """
        handle, index_key = self._open(principal, ref, pin)
        try:
            fd = handle
            found, version = self._locate(fd, ref, pin, line_offset_hint, index_key)
            info = self._info(fd, found, version, ref)
            reader = PayloadReader(
                _file_reader(fd),
                found.raw_start,
                found.raw_end,
                escaped=found.escaped,
                index=found.located.index,
            )
        except BaseException:
            handle.close()
            raise
        return OpenedPayload(info, reader, handle, (version, found.raw_start, found.located.pin))

    def read(
        self,
        principal: Principal | None,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None = None,
    ) -> tuple[MediaInfo, bytes]:
        """The image's metadata and all its decoded bytes (for callers that want them whole)."""
        info, reader, handle = self.open(principal, ref, pin, line_offset_hint)
        with handle:
            try:
                data = reader.read(0, info.size_bytes)
            except (UndecodablePayloadError, ImageNotStrippedError):
                raise CorruptMediaError("the transcript's payload changed while read") from None
        if len(data) != info.size_bytes or hashlib.sha256(data).hexdigest() != info.sha256:
            raise CorruptMediaError("the transcript's payload changed while read")
        return info, data

    def stat(
        self,
        principal: Principal | None,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None = None,
    ) -> MediaInfo:
        """The image's metadata, as `open` gives it.

        The line is still found, parsed and pin-checked; the payload is only
        decoded (streaming) if its metadata is not cached.
        """
        handle, index_key = self._open(principal, ref, pin)
        with handle:
            fd = handle
            found, version = self._locate(fd, ref, pin, line_offset_hint, index_key)
            return self._info(fd, found, version, ref)

    def _at_known_place(
        self,
        fd: ByteSource,
        version: FileVersion,
        ref: TranscriptImageRef,
        pin: str,
        hint: int | None,
        size: int,
    ) -> _Found | None:
        """The image, when the hinted or the cached offset holds its entry; None otherwise.

        An entry named by its offset (`at-<offset>`) is only ever at that
        offset: it is found there or the ref fails here (`_at_named_offset`).
        """
        named = offset_of_entry_name(ref.entry_uuid)
        if named is not None:
            return self._at_named_offset(fd, ref, pin, named, size)
        key = (version, ref.entry_uuid)
        hold = min(self._max_line_size, HOLD_LINE_BYTES)
        lines = LineFile(fd)
        cached = self.cache.get(key)
        if hint is not None and 0 <= hint < size and (cached is None or cached[0] != hint):
            line = lines.line_from(hint, hold)
            if line is not None:
                found = self._try_line(line, hint, ref, pin, _Outcome(), fd)
                if found is not None:
                    self.cache.put(key, (hint, len(line)))
                    return found
            elif lines.starts_line(hint):
                found = self._try_line(None, hint, ref, pin, _Outcome(), fd)
                if found is not None:
                    return found
        if cached is not None:
            line = lines.line_at(*cached, terminated=False)
            if line is not None:
                found = self._try_line(line, cached[0], ref, pin, _Outcome(), fd)
                if found is not None:
                    return found
            self.cache.discard(key)
        return None

    def _at_named_offset(
        self, fd: ByteSource, ref: TranscriptImageRef, pin: str, offset: int, size: int
    ) -> _Found:
        """The image of the uuid-less line at `offset` (docs/contract.md §4), or the error.

        Past the end of the file the entry does not exist (NOT_FOUND). Where no
        line starts there, or the line there has a uuid, or the image there has
        another pin, the file was rewritten since the ref was minted
        (FAILED_PRECONDITION, as a pin mismatch); a line there with no such
        image is NOT_FOUND.
        """
        if offset >= size:
            raise MediaNotFoundError()
        lines = LineFile(fd)
        outcome = _Outcome()
        found: _Found | None = None
        if lines.starts_line(offset):
            line = lines.line_from(offset, min(self._max_line_size, HOLD_LINE_BYTES))
            found = self._try_line(line, offset, ref, pin, outcome, fd)
        else:
            outcome.other_line = True
        if found is not None:
            return found
        if outcome.pin_mismatch or outcome.other_line:
            metrics.PIN_MISMATCHES.inc()
            raise PinMismatchError()
        if outcome.oversize:
            raise LineTooLargeError()
        raise MediaNotFoundError()

    def _in_indexed(
        self,
        fd: ByteSource,
        version: FileVersion,
        ref: TranscriptImageRef,
        pin: str,
        indexed: Sequence[IndexedLine],
    ) -> _Found | None:
        """The image in the first of the entry's indexed lines that holds it; None otherwise."""
        hold = min(self._max_line_size, HOLD_LINE_BYTES)
        for line in indexed:
            found = self._try_indexed(fd, line, ref, pin, hold)
            if found is not None:
                if line.length <= hold:
                    self.cache.put((version, ref.entry_uuid), (line.offset, line.length))
                return found
        return None

    def _slice_read(self, should_stop: Callable[[], bool]) -> None:
        if should_stop():
            raise SearchCancelledError()
        with self._counts:
            self.search_slices += 1

    def stat_many(
        self,
        principal: Principal | None,
        selectors: Sequence[tuple[TranscriptImageRef, str, int | None]],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> list[MediaInfo | Exception]:
        """`stat` of each (ref, pin, hint), in order; each failure is its own error.

        Selectors are grouped by session; per transcript, those a hint or the
        offset cache resolve are answered first and all others in one pass.
        SearchCancelledError (for the whole call) once `should_stop()` is true.
        """
        results: list[MediaInfo | Exception | None] = [None] * len(selectors)
        sessions: dict[str, list[int]] = {}
        for number, (ref, pin, _) in enumerate(selectors):
            try:
                validate_pin(pin)
            except Exception as error:
                results[number] = error
                continue
            sessions.setdefault(ref.session_id, []).append(number)
        for session_id, numbers in sessions.items():
            if should_stop():
                raise SearchCancelledError()
            try:
                transcript = self._root.resolve(session_id, principal)
                handle = self._root.open(transcript)
            except SessionNotFoundError:
                for number in numbers:
                    results[number] = MediaNotFoundError()
                continue
            except Exception as error:
                for number in numbers:
                    results[number] = error
                continue
            with handle:
                fd = handle
                stat = fd.stat()
                version = FileVersion.of(fd, stat)
                pending: list[int] = []
                for number in numbers:
                    ref, pin, hint = selectors[number]
                    try:
                        found = self._at_known_place(fd, version, ref, pin, hint, stat.st_size)
                        info = None if found is None else self._info(fd, found, version, ref)
                    except Exception as error:
                        results[number] = error
                        continue
                    if info is None:
                        pending.append(number)
                    else:
                        results[number] = info
                if pending:
                    pending = self._from_index(
                        fd, self._index_key(transcript), version, selectors, pending, results
                    )
                if pending:
                    self._search_many(fd, version, selectors, pending, results, should_stop)
        return [r if r is not None else MediaNotFoundError() for r in results]

    def _from_index(
        self,
        fd: ByteSource,
        index_key: str,
        version: FileVersion,
        selectors: Sequence[tuple[TranscriptImageRef, str, int | None]],
        pending: list[int],
        results: list[MediaInfo | Exception | None],
    ) -> list[int]:
        """Resolve what the line index can (one lookup for all); return what is left."""
        starts, _ = self._indexed_lines(
            fd, index_key, [selectors[number][0].entry_uuid for number in pending]
        )
        left: list[int] = []
        for number in pending:
            ref, pin, _ = selectors[number]
            try:
                found = self._in_indexed(fd, version, ref, pin, starts.get(ref.entry_uuid, []))
                info = None if found is None else self._info(fd, found, version, ref)
            except Exception as error:
                results[number] = error
                continue
            if info is None:
                left.append(number)
            else:
                results[number] = info
        return left

    def _search_many(
        self,
        fd: ByteSource,
        version: FileVersion,
        selectors: Sequence[tuple[TranscriptImageRef, str, int | None]],
        pending: list[int],
        results: list[MediaInfo | Exception | None],
        should_stop: Callable[[], bool],
    ) -> None:
        """Resolve every pending selector of one transcript in one pass over it."""
        waiting: dict[str, list[int]] = {}
        for number in pending:
            waiting.setdefault(selectors[number][0].entry_uuid, []).append(number)
        outcomes = {number: _Outcome() for number in pending}
        with self._counts:
            self.search_passes += 1
        candidates = iter_candidate_lines_many(
            fd,
            frozenset(waiting),
            min(self._max_line_size, HOLD_LINE_BYTES),
            lambda: self._slice_read(should_stop),
        )
        for entry_id, candidate in candidates:
            numbers = waiting.get(entry_id)
            if not numbers:
                continue
            for number in list(numbers):
                ref, pin, _ = selectors[number]
                try:
                    found = self._try_line(
                        candidate.line, candidate.start, ref, pin, outcomes[number], fd
                    )
                    info = None if found is None else self._info(fd, found, version, ref)
                except Exception as error:
                    results[number] = error
                    numbers.remove(number)
                    continue
                if info is not None:
                    results[number] = info
                    if candidate.line is not None:
                        self.cache.put((version, entry_id), (candidate.start, len(candidate.line)))
                    numbers.remove(number)
            if not numbers:
                del waiting[entry_id]
                if not waiting:
                    break
        for numbers in waiting.values():
            for number in numbers:
                outcome = outcomes[number]
                if outcome.pin_mismatch:
                    metrics.PIN_MISMATCHES.inc()
                    results[number] = PinMismatchError()
                elif outcome.oversize:
                    results[number] = LineTooLargeError()
                else:
                    results[number] = MediaNotFoundError()
