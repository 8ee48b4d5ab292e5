"""Resolving a transcript image ref to its exact bytes (docs/contract.md §2 and §4): the facade.

`TranscriptMedia` opens the ref's transcript as its caller may see it, finds
the entry's line and the image in it (media_service.entry_locator: hint,
cached offset, line index, then the uuid scan of media_service.uuid_scan),
and gives the image's facts (media_service.payload_facts: sha256, type,
dimensions) and a reader of its decoded bytes. What a lookup learns is kept
in one cache per (file version, entry, index, pin)
(media_service.lookup_cache).

The image is never held whole: its metadata comes from one streaming decode
pass, cached per pin (the pin is a hash of the payload's raw text, so a line
whose pin still matches decodes to the same bytes), and reads decode slice by
slice straight from the file (`PayloadReader`).

Many selectors into one transcript (StatMedia) are resolved together: the
hinted, cached and indexed ones first, then one pass over the file for all the
rest (`iter_candidate_lines_many`), checking between slices whether the caller
left or its deadline passed. `search_passes` and `search_slices` count
full-file passes and the slices they read.

Blocking I/O throughout: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from media_service.blobs import MediaInfo
from media_service.decoded import DecodedKey
from media_service.entry_locator import EntryLocator, Outcome, lookup_key
from media_service.errors import CorruptMediaError, MediaNotFoundError, SearchCancelledError
from media_service.lookup_cache import LookupCache
from media_service.payload_facts import Found, payload_info, payload_reader
from media_service.uuid_scan import iter_candidate_lines_many
from scrollback.contract.extraction import (
    ImageNotStrippedError,
    PayloadReader,
    UndecodablePayloadError,
)
from scrollback.contract.refs import TranscriptImageRef, validate_pin
from scrollback.linefile import ByteSource, FileVersion
from scrollback.lineindex import LineIndex
from scrollback.opencode.naming import PartImages
from scrollback.principals import Principal
from scrollback.transcripts import SessionNotFoundError, TranscriptFile, TranscriptSource

# A StatMedia selector: (ref, pin, line offset hint).
StatSelector = tuple[TranscriptImageRef, str, int | None]


@dataclass(frozen=True, slots=True)
class OpenedPayload:
    """An image found and verified: metadata, a reader of its decoded bytes, its open file.

    `key` (file version, payload offset, pin) names its decoded bytes.
    """

    info: MediaInfo
    reader: PayloadReader
    handle: ByteSource
    key: DecodedKey


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
        self.lookups = LookupCache(cache_entries)
        self.locator = EntryLocator(
            max_line_size=max_line_size, lookups=self.lookups, line_index=line_index
        )
        # Full-file passes of stat_many and the slices they read (for tests and metrics).
        self.search_passes = 0
        self.search_slices = 0
        self._counts = threading.Lock()

    @property
    def line_index(self) -> LineIndex | None:
        """The persisted line index the lookups use, if any."""
        return self.locator.line_index

    def close(self) -> None:
        """Close the line index's store."""
        if self.line_index is not None:
            self.line_index.close()

    def _open(
        self, principal: Principal | None, ref: TranscriptImageRef, pin: str
    ) -> tuple[ByteSource, str, TranscriptImageRef]:
        """The ref's transcript, open, its name in the line index (its path under the root),
        and the ref as its line names it (`_in_line`)."""
        validate_pin(pin)
        try:
            transcript = self._root.resolve(ref.session_id, principal)
            in_line = self._in_line(transcript, ref)
            return self._root.open(transcript), self._root.key_of(transcript), in_line
        except SessionNotFoundError:
            raise MediaNotFoundError() from None

    def _in_line(self, transcript: TranscriptFile, ref: TranscriptImageRef) -> TranscriptImageRef:
        """The ref as the transcript's line names it: a ref to an image of an opencode part
        (`<session>/<part id>/<index>`) as its message's (scrollback.opencode.naming)."""
        if not isinstance(self._root, PartImages):
            return ref
        found = self._root.entry_of_part(transcript, ref.entry_uuid, ref.index)
        if found is None:
            return ref
        return TranscriptImageRef(ref.session_id, found[0], found[1])

    def _info(
        self, fd: ByteSource, found: Found, version: FileVersion, ref: TranscriptImageRef
    ) -> MediaInfo:
        """The decoded bytes' metadata: cached per pin, else one streaming pass over them."""
        located = found.located
        key = lookup_key(version, ref, located.pin)
        info = self.lookups.info(key)
        if info is None:
            info = payload_info(fd, found)
            self.lookups.remember_info(key, info)
        if info.declared_media_type != located.declared_media_type:
            info = dataclasses.replace(info, declared_media_type=located.declared_media_type)
        return info

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
        handle, index_key, ref = self._open(principal, ref, pin)
        try:
            found, version = self.locator.locate(handle, ref, pin, line_offset_hint, index_key)
            info = self._info(handle, found, version, ref)
            reader = payload_reader(handle, found)
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
        handle, index_key, ref = self._open(principal, ref, pin)
        with handle:
            found, version = self.locator.locate(handle, ref, pin, line_offset_hint, index_key)
            return self._info(handle, found, version, ref)

    def stat_many(
        self,
        principal: Principal | None,
        selectors: Sequence[StatSelector],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> list[MediaInfo | Exception]:
        """`stat` of each (ref, pin, hint), in order; each failure is its own error.

        Selectors are grouped by session; per transcript, those a hint or the
        offset cache resolve are answered first and all others in one pass.
        SearchCancelledError (for the whole call) once `should_stop()` is true.
        """
        results: list[MediaInfo | Exception | None] = [None] * len(selectors)
        in_line = list(selectors)  # each ref as its transcript's line names it (`_in_line`)
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
                index_key = self._root.key_of(transcript)
                numbers = self._in_lines(transcript, in_line, numbers, results)
                self._stat_in(handle, index_key, in_line, numbers, results, should_stop)
        return [r if r is not None else MediaNotFoundError() for r in results]

    def _in_lines(
        self,
        transcript: TranscriptFile,
        selectors: list[StatSelector],
        numbers: list[int],
        results: list[MediaInfo | Exception | None],
    ) -> list[int]:
        """Each of the selectors `numbers` as its line names it (in place); those that
        failed get their error and are left out."""
        kept: list[int] = []
        for number in numbers:
            ref, pin, hint = selectors[number]
            try:
                selectors[number] = (self._in_line(transcript, ref), pin, hint)
            except Exception as error:
                results[number] = error
                continue
            kept.append(number)
        return kept

    def _stat_in(
        self,
        fd: ByteSource,
        index_key: str,
        selectors: Sequence[StatSelector],
        numbers: list[int],
        results: list[MediaInfo | Exception | None],
        should_stop: Callable[[], bool],
    ) -> None:
        """Resolve the selectors `numbers` of one open transcript: known places, index, search."""
        stat = fd.stat()
        version = FileVersion.of(fd, stat)
        pending: list[int] = []
        for number in numbers:
            ref, pin, hint = selectors[number]
            try:
                found = self.locator.at_known_place(fd, version, ref, pin, hint, stat.st_size)
                info = None if found is None else self._info(fd, found, version, ref)
            except Exception as error:
                results[number] = error
                continue
            if info is None:
                pending.append(number)
            else:
                results[number] = info
        if pending:
            pending = self._from_index(fd, index_key, version, selectors, pending, results)
        if pending:
            self._search_many(fd, version, selectors, pending, results, should_stop)

    def _from_index(
        self,
        fd: ByteSource,
        index_key: str,
        version: FileVersion,
        selectors: Sequence[StatSelector],
        pending: list[int],
        results: list[MediaInfo | Exception | None],
    ) -> list[int]:
        """Resolve what the line index can (one lookup for all); return what is left."""
        starts, _ = self.locator.indexed_lines(
            fd, index_key, [selectors[number][0].entry_uuid for number in pending]
        )
        left: list[int] = []
        for number in pending:
            ref, pin, _ = selectors[number]
            try:
                indexed = starts.get(ref.entry_uuid, [])
                found = self.locator.in_indexed(fd, version, ref, pin, indexed)
                info = None if found is None else self._info(fd, found, version, ref)
            except Exception as error:
                results[number] = error
                continue
            if info is None:
                left.append(number)
            else:
                results[number] = info
        return left

    def _slice_read(self, should_stop: Callable[[], bool]) -> None:
        if should_stop():
            raise SearchCancelledError()
        with self._counts:
            self.search_slices += 1

    def _search_many(
        self,
        fd: ByteSource,
        version: FileVersion,
        selectors: Sequence[StatSelector],
        pending: list[int],
        results: list[MediaInfo | Exception | None],
        should_stop: Callable[[], bool],
    ) -> None:
        """Resolve every pending selector of one transcript in one pass over it."""
        waiting: dict[str, list[int]] = {}
        for number in pending:
            waiting.setdefault(selectors[number][0].entry_uuid, []).append(number)
        outcomes = {number: Outcome() for number in pending}
        with self._counts:
            self.search_passes += 1
        candidates = iter_candidate_lines_many(
            fd, frozenset(waiting), self.locator.hold, lambda: self._slice_read(should_stop)
        )
        for entry_id, candidate in candidates:
            numbers = waiting.get(entry_id)
            if not numbers:
                continue
            for number in list(numbers):
                ref, pin, _ = selectors[number]
                try:
                    found = self.locator.try_line(
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
                        key = lookup_key(version, ref, pin)
                        self.lookups.remember_line(key, candidate.start, len(candidate.line))
                    numbers.remove(number)
            if not numbers:
                del waiting[entry_id]
                if not waiting:
                    break
        for numbers in waiting.values():
            for number in numbers:
                results[number] = outcomes[number].error()
