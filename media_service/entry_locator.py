"""Finding the line of a transcript image's entry, and the image in it (docs/contract.md §2, §4).

The entry's line is found, in this order:

1. at the ref's line offset hint (the offset the history service saw the line
   at), if the caller has one: the offset must start a line, the line is read
   up to its newline with bounded reads (never past the max line size) and
   must parse with the top-level uuid asked for and the pin asked for;
2. at the offset remembered in the lookup cache (media_service.lookup_cache),
   re-verified the same way;
3. at the offsets the persisted line index (scrollback.lineindex) gives for
   the uuid, re-verified the same way (extended as the file grows, rebuilt when
   it is rewritten; it survives a restart). A file whose index does not cover
   it is answered from the part built so far and the search below, from the
   end of that part, while the rest is built in the background: the first
   touch of a file costs O(the entry's position), not a whole-file build;
4. by the uuid scan (media_service.uuid_scan), each candidate line parsed with
   the shared stripper, whose top-level uuid must be the one asked for.

A wrong, stale or hostile hint or cached offset only ever costs a search:
whatever either points at is verified exactly as a searched line is. Only the
one line is read; a line over 4 MiB (HOLD_LINE_BYTES), or over the max line
size, is never held: it is stripped streaming from the file
(`strip_line_streamed`), so a ref minted in a line of any size resolves. Each
line is stripped once by the same enumeration code that minted the ref, and
the image located and pin-checked.

An image found while the file had settled is found again without reading the
line, for as long as the file keeps that stamp (`locate`).

Blocking I/O throughout: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from media_service.errors import LineTooLargeError, MediaNotFoundError, PinMismatchError
from media_service.lookup_cache import LookupCache, LookupKey
from media_service.payload_facts import Found, has_backslash
from media_service.uuid_scan import iter_candidate_lines
from scrollback.contract.extraction import (
    ImageNotFoundError,
    ImageNotStrippedError,
    locate_in_stripped,
    strip_for_extraction,
)
from scrollback.contract.refs import TranscriptImageRef, has_usable_uuid, offset_of_entry_name
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line_streamed
from scrollback.linefile import ByteSource, FileVersion, LineFile
from scrollback.lineindex import INDEX_UNAVAILABLE, LineIndex
from scrollback.server import metrics
from scrollback.state.line_index import IndexedLine
from scrollback.transcripts import stamp_of

# An index this close to the file's end is extended before a lookup answers.
CATCH_UP_BYTES = 8 * 1024 * 1024
# A candidate line up to this size is read whole to be stripped (fastest);
# a longer one is stripped streaming, so that no read holds a large line.
HOLD_LINE_BYTES = 4 * 1024 * 1024


def lookup_key(version: FileVersion, ref: TranscriptImageRef, pin: str) -> LookupKey:
    """The image's key in the lookup cache."""
    return (version, ref.entry_uuid, ref.index, pin)


class LineChanged(ValueError):
    """A line that shrank while it was read: read as not JSON, like any other broken line."""

    def __init__(self) -> None:
        super().__init__("the line changed while read")


class Outcome:
    """What the candidate lines said, for the error when none serves."""

    def __init__(self) -> None:
        self.other_line = False  # an offset-named entry's place holds another line
        self.pin_mismatch = False
        self.oversize = False

    def error(self) -> Exception:
        """The error when no line served: pin mismatch, line too large, or not found."""
        if self.pin_mismatch:
            metrics.PIN_MISMATCHES.inc()
            return PinMismatchError()
        if self.oversize:
            return LineTooLargeError()
        return MediaNotFoundError()


class EntryLocator:
    """Transcript image refs -> the verified place of their image in an open transcript."""

    def __init__(
        self, *, max_line_size: int, lookups: LookupCache, line_index: LineIndex | None = None
    ) -> None:
        self.max_line_size = max_line_size
        # Lines up to this size are read whole; longer ones are stripped streaming.
        self.hold = min(max_line_size, HOLD_LINE_BYTES)
        self.lookups = lookups
        self.line_index = line_index

    def locate(
        self,
        fd: ByteSource,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None,
        index_key: str = "",
    ) -> tuple[Found, FileVersion]:
        """Find the entry's line in the open transcript and the image in it.

        An image found while the file had settled is found again without
        reading the line, for as long as the file keeps that stamp: nothing in
        it can have changed (scrollback.transcripts.stamp_of).
        """
        stat = fd.stat()  # before any byte is read: a write after it changes the stamp
        version = FileVersion.of(fd, stat)
        stamp = stamp_of(stat)
        key = lookup_key(version, ref, pin)
        if stamp is not None:
            known = self.lookups.found(key, stamp, line_offset_hint)
            if known is not None:
                return known, version
        found = self.find(fd, version, stat.st_size, ref, pin, line_offset_hint, index_key)
        if stamp is not None:
            self.lookups.remember_found(key, stamp, line_offset_hint, found)
        return found, version

    def find(
        self,
        fd: ByteSource,
        version: FileVersion,
        size: int,
        ref: TranscriptImageRef,
        pin: str,
        line_offset_hint: int | None,
        index_key: str,
    ) -> Found:
        """`locate`'s search: the hint, the cached offset, the line index, then the file.

        StatMedia asks in the same order, the file's search made once for all
        the selectors the others leave (media_service.transcript_media).
        """
        found = self.at_known_place(fd, version, ref, pin, line_offset_hint, size)
        scan_from = 0
        if found is None and index_key:
            indexed, scan_from = self.indexed_lines(fd, index_key, [ref.entry_uuid])
            found = self.in_indexed(fd, version, ref, pin, indexed.get(ref.entry_uuid, []))
        if found is not None:
            return found
        outcome = Outcome()
        candidates = iter_candidate_lines(fd, ref.entry_uuid, self.hold, scan_from)
        if scan_from:
            # Past the part indexed so far first; the part before it only if the
            # entry is not there (an index is a list of candidates, not the truth).
            candidates = itertools.chain(
                candidates, iter_candidate_lines(fd, ref.entry_uuid, self.hold)
            )
        for candidate in candidates:
            found = self.try_line(candidate.line, candidate.start, ref, pin, outcome, fd)
            if found is not None:
                if candidate.line is not None:
                    self.lookups.remember_line(
                        lookup_key(version, ref, pin), candidate.start, len(candidate.line)
                    )
                return found
        raise outcome.error()

    def at_known_place(
        self,
        fd: ByteSource,
        version: FileVersion,
        ref: TranscriptImageRef,
        pin: str,
        hint: int | None,
        size: int,
    ) -> Found | None:
        """The image, when the hinted or the cached offset holds its entry; None otherwise.

        An entry named by its offset (`at-<offset>`) is only ever at that
        offset: it is found there or the ref fails here (`_at_named_offset`).
        """
        named = offset_of_entry_name(ref.entry_uuid)
        if named is not None:
            return self._at_named_offset(fd, ref, pin, named, size)
        key = lookup_key(version, ref, pin)
        lines = LineFile(fd)
        cached = self.lookups.line(key)
        if hint is not None and 0 <= hint < size and (cached is None or cached[0] != hint):
            line = lines.line_from(hint, self.hold)
            if line is not None:
                found = self.try_line(line, hint, ref, pin, Outcome(), fd)
                if found is not None:
                    self.lookups.remember_line(key, hint, len(line))
                    return found
            elif lines.starts_line(hint):
                found = self.try_line(None, hint, ref, pin, Outcome(), fd)
                if found is not None:
                    return found
        if cached is not None:
            line = lines.line_at(*cached, terminated=False)
            if line is not None:
                found = self.try_line(line, cached[0], ref, pin, Outcome(), fd)
                if found is not None:
                    return found
            self.lookups.forget_line(key)
        return None

    def _at_named_offset(
        self, fd: ByteSource, ref: TranscriptImageRef, pin: str, offset: int, size: int
    ) -> Found:
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
        outcome = Outcome()
        found: Found | None = None
        if lines.starts_line(offset):
            line = lines.line_from(offset, self.hold)
            found = self.try_line(line, offset, ref, pin, outcome, fd)
        else:
            outcome.other_line = True
        if found is not None:
            return found
        outcome.pin_mismatch = outcome.pin_mismatch or outcome.other_line
        raise outcome.error()

    def indexed_lines(
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

    def in_indexed(
        self,
        fd: ByteSource,
        version: FileVersion,
        ref: TranscriptImageRef,
        pin: str,
        indexed: Sequence[IndexedLine],
    ) -> Found | None:
        """The image in the first of the entry's indexed lines that holds it; None otherwise."""
        for line in indexed:
            found = self._try_indexed(fd, line, ref, pin)
            if found is not None:
                if line.length <= self.hold:
                    self.lookups.remember_line(
                        lookup_key(version, ref, pin), line.offset, line.length
                    )
                return found
        return None

    def _try_indexed(
        self, fd: ByteSource, indexed: IndexedLine, ref: TranscriptImageRef, pin: str
    ) -> Found | None:
        """The image if the indexed line is the entry (verified as a searched line is).

        The line must still start at its offset and end after its length; a
        long one is stripped streaming from the file, never held.
        """
        if indexed.length <= self.hold:
            line = LineFile(fd).line_at(indexed.offset, indexed.length, terminated=False)
            if line is None:
                return None
            return self.try_line(line, indexed.offset, ref, pin, Outcome(), fd)
        if not LineFile(fd).starts_line(indexed.offset):
            return None
        if LineFile(fd).line_length(indexed.offset) != indexed.length:
            return None
        return self.try_line(None, indexed.offset, ref, pin, Outcome(), fd)

    def try_line(
        self,
        line: bytes | None,
        start: int,
        ref: TranscriptImageRef,
        pin: str,
        outcome: Outcome,
        fd: ByteSource,
    ) -> Found | None:
        """Where the image is if this line is the entry with the pin asked for; else None.

        `line` is the line's bytes, or None for a line over the max line size:
        that one is stripped by streaming it from the file, never held.
        """
        if line is not None:
            stripped = strip_for_extraction(line)
        else:
            size = LineFile(fd).line_length(start)
            stripped = strip_line_streamed(
                LineFile(fd).line_reader(start, size, LineChanged),
                size,
                MIN_INLINE_LIMIT,
                self.max_line_size,
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
            escaped = has_backslash(fd, raw_start, raw_end)
        return Found(located, raw_start, raw_end, escaped)
