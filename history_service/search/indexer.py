"""Keeping the search index up to date with the transcripts, incrementally.

Transcripts only grow, so each file's progress is a byte offset: a pass
indexes the complete lines past it (an unterminated last line waits for its
newline) and moves it on. How far such a tail was searched for its newline
is remembered (TAIL_SCANS, and the size a pass reached), so an idle file is
not read again and a growing one only for its new bytes. The file's identity (device, inode, first bytes,
as page tokens take it) is kept with the progress; a file that no longer
continues it was rewritten and is indexed again from the start, and a file
gone from the root is dropped. Lines are streamed (one block plus the line
at hand) and written in batches of bounded rows and bytes, so memory stays
bounded whatever a session weighs. `run` makes a pass at start-up and then
every `interval` seconds, in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from history_service.errors import FileRewrittenError
from history_service.insight import InsightFeed, InsightIndex
from history_service.lines import (
    TAIL_SCANS,
    MediaMode,
    RawLine,
    is_blank,
    iter_lines_forward,
    serve_line,
)
from history_service.search.store import EntryRow, FileState, SearchIndex, timestamp_ms
from history_service.search.text import entry_text
from scrollback.contract.stripping import MIN_INLINE_LIMIT, StrippedLine, parse_json_object
from scrollback.contract.text import indexable
from scrollback.layouts import CODEX
from scrollback.linefile import ByteSource, FileIdentity, FileVersion
from scrollback.lineindex import LineFeed, LineIndex, background_priority
from scrollback.objects import ObjectChangedError
from scrollback.transcripts import TranscriptFile, TranscriptSource

log = logging.getLogger(__name__)

# Entries are handed to the index in large batches, bounded so memory stays
# bounded (the index commits by its own size and time bounds).
BATCH_ROWS = 20_000
BATCH_TEXT_BYTES = 16 * 1024 * 1024


def by_project(listed: list[TranscriptFile]) -> list[TranscriptFile]:
    """The listing with each project's files together, projects in the order they first
    appear (the listing's own order within each): an index may keep one writer per project,
    and going back and forth between projects would hand writers over at every turn."""
    first: dict[str, int] = {}
    for number, transcript in enumerate(listed):
        first.setdefault(transcript.project_dir, number)
    return sorted(listed, key=lambda transcript: first[transcript.project_dir])


def identity_text(identity: FileIdentity) -> str:
    """How the index stores a file identity (its size is the progress, kept apart)."""
    version = identity.version
    return f"{version.dev}:{version.ino}:{version.head_len}:{version.head_hash}"


def identity_at(text: str, size: int) -> FileIdentity:
    """The stored identity as of `size` bytes (ValueError if malformed)."""
    dev, ino, head_len, head_hash = (int(part) for part in text.split(":"))
    return FileIdentity(FileVersion(dev, ino, head_len, head_hash), size)


@dataclass
class IndexStats:
    """What the indexer has done since it started."""

    passes: int = 0
    files_indexed: int = 0
    files_reset: int = 0
    entries: int = 0
    bytes_read: int = 0


def search_row(
    raw: RawLine, stripped: StrippedLine, parsed: dict[str, Any] | None = None
) -> EntryRow | None:
    """What the search index keeps of one line (stripped at MIN_INLINE_LIMIT, `parsed`: its
    JSON if parsed already); None: nothing."""
    found = entry_text(stripped, parsed)
    if found is None:
        return None
    text = indexable(found.text)
    return EntryRow(
        offset=raw.start,
        line_end=raw.next_start,
        # The same text on every backend (scrollback.contract.text).
        uuid=indexable(found.uuid),
        type=indexable(found.type),
        role=indexable(found.role),
        timestamp=indexable(found.timestamp),
        ts_ms=timestamp_ms(found.timestamp),
        has_photos=found.has_photos,
        text=text,
        prompt=text if found.prompt else "",
    )


class SearchIndexer:
    """Indexes the transcripts under one root into one SearchIndex.

    Given the line index and the insight index, each pass over a file feeds
    them too from the same read of its lines (`_one_pass`).
    """

    def __init__(
        self,
        root: TranscriptSource,
        index: SearchIndex,
        *,
        max_line_size: int,
        line_index: LineIndex | None = None,
        insight: InsightIndex | None = None,
    ) -> None:
        self._root = root
        self._index = index
        self._max_line_size = max_line_size
        self._line_index = line_index
        self._insight = insight
        self.stats = IndexStats()
        # Set by `stop`: a pass in its thread ends at the next file or batch.
        self._stopping = threading.Event()
        self._pass: asyncio.Future[None] | None = None
        # Per file key, (device, inode, size) when a pass searched all of its bytes
        # and stopped at an unterminated tail: the same file at that size is unchanged.
        self._searched: dict[str, tuple[int, int, int]] = {}

    def catch_up(self) -> None:
        """One pass over every transcript (blocking)."""
        known = self._index.files()
        seen: set[str] = set()
        whole = True
        for transcript in by_project(self._root.list(None)):
            if self._stopping.is_set():
                self._index.flush()
                return
            key = self.path_key(transcript)
            seen.add(key)
            try:
                self._index_file(transcript, key, known.get(key))
            except LookupError:
                # Reset meanwhile, or its project indexed by another process.
                whole = False
            except (FileRewrittenError, OSError, ObjectChangedError):
                continue  # gone or rewritten meanwhile: the next pass sees it anew
        for gone in known.keys() - seen:
            self._index.drop_file(gone)
        for gone in self._searched.keys() - seen:
            del self._searched[gone]
        self._index.flush()
        if whole:
            self._index.mark_complete()
        self.stats.passes += 1

    def path_key(self, transcript: TranscriptFile) -> str:
        """A transcript's key in the index: its path under the root."""
        return self._root.key_of(transcript)

    def _index_file(self, transcript: TranscriptFile, key: str, state: FileState | None) -> None:
        if state is not None and (state.project_dir, state.session_id) != (
            transcript.project_dir,
            transcript.unique_id,
        ):
            state = None  # indexed under another name (project or id): its rows are redone
        if state is not None:
            try:
                stat = self._root.stat(transcript)
            except OSError:
                return
            stored = identity_at(state.identity, state.indexed_to)
            now = (stat.st_dev, stat.st_ino, stat.st_size)
            if now in (
                (stored.version.dev, stored.version.ino, state.indexed_to),
                self._searched.get(key),
            ):
                return  # unchanged since the last pass
        fd, current = self._open(transcript)
        try:
            start = 0
            file_id = -1
            if state is not None:
                try:
                    identity_at(state.identity, state.indexed_to).check(
                        fd, state.indexed_to, self._root.version
                    )
                    file_id, start = state.file_id, state.indexed_to
                except FileRewrittenError:
                    self.stats.files_reset += 1
            if file_id < 0:
                file_id = self._index.reset_file(
                    key, transcript.project_dir, transcript.unique_id, identity_text(current)
                )
            if start < current.size:
                search = _SearchFeed(self, file_id, start)
                if self._one_pass(transcript, fd, key, search, current):
                    self._searched[key] = (current.version.dev, current.version.ino, current.size)
                else:
                    self._searched.pop(key, None)
                self.stats.files_indexed += 1
        finally:
            fd.close()

    def _open(self, transcript: TranscriptFile) -> tuple[ByteSource, FileIdentity]:
        """The version this pass listed (a bucket's object needs no HEAD) and its identity,
        or the version there now if that one was replaced since."""
        fd = self._root.open_listed(transcript)
        try:
            return fd, FileIdentity.of(fd, self._root.version)
        except BaseException as error:
            fd.close()
            if not isinstance(error, ObjectChangedError):
                raise
        fd = self._root.open(transcript)
        try:
            return fd, FileIdentity.of(fd, self._root.version)
        except BaseException:
            fd.close()
            raise

    def _one_pass(
        self,
        transcript: TranscriptFile,
        fd: ByteSource,
        key: str,
        search: _SearchFeed,
        current: FileIdentity,
    ) -> bool:
        """Read the file's new lines once, feeding search and, when given, the line index
        and insight (each from where it stopped); each line is stripped once for all.

        True if every byte was read and the file ends with an unterminated tail."""
        lines = None if self._line_index is None else self._line_index.feed(key, fd)
        insight = None
        if self._insight is not None:
            insight = self._insight.try_feed(
                fd, (transcript.project_dir, transcript.unique_id), transcript.source == CODEX
            )
        try:
            return self._feed(fd, current, search, lines, insight)
        finally:
            if insight is not None:
                insight.release()

    def _feed(
        self,
        fd: ByteSource,
        current: FileIdentity,
        search: _SearchFeed,
        lines: LineFeed | None,
        insight: InsightFeed | None,
    ) -> bool:
        starts = [search.start]
        if lines is not None:
            starts.append(lines.start)
        if insight is not None:
            starts.append(insight.start)
        begin, size, version = min(starts), current.size, current.version
        searched_tail = False
        clear = TAIL_SCANS.clear_to(fd, version, begin, size)
        for raw in iter_lines_forward(fd, begin, size, self._max_line_size, clear):
            wants_search = search.active and raw.start >= search.start
            wants_insight = insight is not None and insight.active and raw.start >= insight.start
            if lines is not None:
                lines.line(raw.start, raw.end, raw.data, raw.terminated)
            if not raw.terminated:
                TAIL_SCANS.remember(fd, version, raw.start, raw.end)
                searched_tail = raw.end == size
                if raw.data is None:
                    # Too long to hold and still being written: nothing counts it
                    # before its newline, so it is not stripped (read) at all.
                    break
            if not (wants_search or wants_insight):
                continue
            stripped = None
            if not is_blank(raw):
                served = serve_line(raw, MediaMode.DEFERRED, MIN_INLINE_LIMIT, self._max_line_size)
                stripped = None if served is None else served.stripped
            # One parse of the stripped line, for insight and search both.
            entry = None
            if stripped is not None and not stripped.oversize:
                entry = parse_json_object(stripped.json)
            if wants_insight and insight is not None:
                insight.line(raw, stripped, entry)
            if wants_search and not search.line(raw, stripped, entry) and self._stopping.is_set():
                return False  # not written: the next server's pass starts from there
        search.finish()
        if lines is not None:
            lines.finish()
        if insight is not None:
            insight.finish()
        return searched_tail

    async def run(self, interval: float) -> None:
        """Catch up now, then every `interval` seconds, until cancelled or stopped.

        The passes run on a thread of their own at a low OS priority
        (`background_priority`): requests get the CPU first.
        """
        loop = asyncio.get_running_loop()
        thread = ThreadPoolExecutor(
            1, thread_name_prefix="search-index", initializer=background_priority
        )
        try:
            await self._run(loop, thread, interval)
        finally:
            thread.shutdown(wait=False)

    async def _run(
        self, loop: asyncio.AbstractEventLoop, thread: ThreadPoolExecutor, interval: float
    ) -> None:
        while not self._stopping.is_set():
            self._pass = loop.run_in_executor(thread, self.catch_up)
            try:
                # Shielded: cancelling the loop must not orphan the pass's thread;
                # `stop` waits for it before the index is closed under it.
                await asyncio.shield(self._pass)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("search indexing pass failed")
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        """Ask a running pass to end and wait until its thread no longer uses the index."""
        self._stopping.set()
        if self._pass is not None:
            with contextlib.suppress(Exception):
                await self._pass

    @property
    def stopping(self) -> bool:
        """True once `stop` was asked: a pass ends at its next batch."""
        return self._stopping.is_set()


class _SearchFeed:
    """One file's new entries into the search index, in batches of bounded rows and text."""

    def __init__(self, indexer: SearchIndexer, file_id: int, start: int) -> None:
        self._indexer = indexer
        self._file_id = file_id
        self._rows: list[EntryRow] = []
        self._text_bytes = 0
        self._batch_start = self._progress = start
        self._failed = False
        self.start = start
        self.active = True  # False once it wants no more lines

    def line(
        self, raw: RawLine, stripped: StrippedLine | None, parsed: dict[str, Any] | None = None
    ) -> bool:
        """One line from `start` on (`stripped` None: blank or not an object; `parsed`: its
        JSON, if parsed); False once done."""
        if not raw.terminated:
            self.active = False  # the line being written: indexed once it is complete
            return False
        self._progress = raw.next_start
        stats = self._indexer.stats
        stats.bytes_read += raw.size + 1
        row = None if stripped is None else search_row(raw, stripped, parsed)
        if row is not None:
            self._rows.append(row)
            self._text_bytes += len(row.text)
        full = len(self._rows) >= BATCH_ROWS or self._text_bytes >= BATCH_TEXT_BYTES
        if full and (self._indexer.stopping or not self._write()):
            self.active, self._failed = False, True
            return False
        return True

    def finish(self) -> None:
        """Write the last batch (kept unwritten when the indexer is stopping)."""
        if not self._failed and not self._indexer.stopping:
            self._write()
        self.active, self._failed = False, True

    def _write(self) -> bool:
        if self._progress <= self._batch_start:
            return True
        index = self._indexer._index
        if not index.add_entries(self._file_id, self._rows, self._batch_start, self._progress):
            return False  # another indexer is ahead on this file
        self._indexer.stats.entries += len(self._rows)
        self._rows, self._text_bytes, self._batch_start = [], 0, self._progress
        return True
