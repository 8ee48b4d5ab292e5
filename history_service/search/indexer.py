"""Keeping the search index up to date with the transcripts, incrementally.

Transcripts only grow, so each file's progress is a byte offset: a pass
indexes the complete lines past it (an unterminated last line waits for its
newline) and moves it on. The file's identity (device, inode, first bytes,
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
import os
import threading
from dataclasses import dataclass

from history_service.errors import FileRewrittenError
from history_service.lines import is_blank, iter_lines_forward
from history_service.search.store import EntryRow, FileState, SearchIndex, timestamp_ms
from history_service.search.text import entry_text
from history_service.tokens import FileIdentity
from history_service.windows import open_transcript
from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    StrippedLine,
    strip_line,
    strip_line_streamed,
)
from scrollback.contract.text import indexable
from scrollback.transcripts import TranscriptFile, TranscriptRoot

log = logging.getLogger(__name__)

BATCH_ROWS = 500
BATCH_TEXT_BYTES = 4 * 1024 * 1024


def identity_text(identity: FileIdentity) -> str:
    """How the index stores a file identity (its size is the progress, kept apart)."""
    return f"{identity.dev}:{identity.ino}:{identity.head_len}:{identity.head_hash}"


def identity_at(text: str, size: int) -> FileIdentity:
    """The stored identity as of `size` bytes (ValueError if malformed)."""
    dev, ino, head_len, head_hash = (int(part) for part in text.split(":"))
    return FileIdentity(dev, ino, head_len, head_hash, size)


@dataclass
class IndexStats:
    """What the indexer has done since it started."""

    passes: int = 0
    files_indexed: int = 0
    files_reset: int = 0
    entries: int = 0
    bytes_read: int = 0


class SearchIndexer:
    """Indexes the transcripts under one root into one SearchIndex."""

    def __init__(self, root: TranscriptRoot, index: SearchIndex, *, max_line_size: int) -> None:
        self._root = root
        self._index = index
        self._max_line_size = max_line_size
        self.stats = IndexStats()
        # Set by `stop`: a pass in its thread ends at the next file or batch.
        self._stopping = threading.Event()
        self._pass: asyncio.Future[None] | None = None

    def catch_up(self) -> None:
        """One pass over every transcript (blocking)."""
        known = self._index.files()
        seen: set[str] = set()
        for transcript in self._root.list(None):
            if self._stopping.is_set():
                return
            key = self.path_key(transcript)
            seen.add(key)
            try:
                self._index_file(transcript, key, known.get(key))
            except (LookupError, FileRewrittenError, OSError):
                continue  # gone, rewritten or reset meanwhile: the next pass sees it anew
        for gone in known.keys() - seen:
            self._index.drop_file(gone)
        self.stats.passes += 1

    def path_key(self, transcript: TranscriptFile) -> str:
        """A transcript's key in the index: its path under the root."""
        return self._root.key_of(transcript)

    def _index_file(self, transcript: TranscriptFile, key: str, state: FileState | None) -> None:
        if state is not None:
            try:
                stat = os.stat(transcript.path)
            except OSError:
                return
            stored = identity_at(state.identity, state.indexed_to)
            if (stat.st_dev, stat.st_ino, stat.st_size) == (
                stored.dev,
                stored.ino,
                state.indexed_to,
            ):
                return  # unchanged since the last pass
        fd = open_transcript(self._root, transcript)
        try:
            current = FileIdentity.of(fd)
            start = 0
            file_id = -1
            if state is not None:
                try:
                    identity_at(state.identity, state.indexed_to).check(fd, state.indexed_to)
                    file_id, start = state.file_id, state.indexed_to
                except FileRewrittenError:
                    self.stats.files_reset += 1
            if file_id < 0:
                file_id = self._index.reset_file(
                    key, transcript.project_dir, transcript.session_id, identity_text(current)
                )
            if start < current.size:
                self._index_lines(fd, file_id, start, current.size)
                self.stats.files_indexed += 1
        finally:
            os.close(fd)

    def _index_lines(self, fd: int, file_id: int, start: int, size: int) -> None:
        rows: list[EntryRow] = []
        text_bytes = 0
        batch_start = progress = start
        for raw in iter_lines_forward(fd, start, size, self._max_line_size):
            if not raw.terminated:
                break  # the line being written: indexed once it is complete
            progress = raw.next_start
            self.stats.bytes_read += raw.size + 1
            if is_blank(raw):
                continue
            stripped = self._strip(fd, raw.start, raw.size, raw.data)
            found = entry_text(stripped) if stripped is not None else None
            if found is not None:
                rows.append(
                    EntryRow(
                        offset=raw.start,
                        line_end=raw.next_start,
                        # The same text on every backend (scrollback.contract.text).
                        uuid=indexable(found.uuid),
                        type=indexable(found.type),
                        role=indexable(found.role),
                        timestamp=indexable(found.timestamp),
                        ts_ms=timestamp_ms(found.timestamp),
                        has_photos=found.has_photos,
                        text=indexable(found.text),
                    )
                )
                text_bytes += len(found.text)
            if len(rows) >= BATCH_ROWS or text_bytes >= BATCH_TEXT_BYTES:
                if self._stopping.is_set():
                    return  # not written: the next server's pass starts from `batch_start`
                if not self._index.add_entries(file_id, rows, batch_start, progress):
                    return  # another indexer is ahead on this file
                self.stats.entries += len(rows)
                rows, text_bytes, batch_start = [], 0, progress
        if progress > batch_start and self._index.add_entries(file_id, rows, batch_start, progress):
            self.stats.entries += len(rows)

    def _strip(self, fd: int, start: int, size: int, data: bytes | None) -> StrippedLine | None:
        # The smallest inline limit: every payload any window could cut is cut here.
        if data is not None:
            return strip_line(data, MIN_INLINE_LIMIT, self._max_line_size)

        def read(offset: int, length: int) -> bytes:
            chunk = os.pread(fd, length, start + offset)
            if len(chunk) != length:
                raise FileRewrittenError()
            return chunk

        return strip_line_streamed(read, size, MIN_INLINE_LIMIT, self._max_line_size)

    async def run(self, interval: float) -> None:
        """Catch up now, then every `interval` seconds, until cancelled or stopped."""
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            self._pass = loop.run_in_executor(None, self.catch_up)
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
