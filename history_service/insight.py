"""Session insight (docs/contract.md §13): what a transcript holds, kept in an index.

`InsightIndex` brings a transcript's index up to date and reads it;
`InsightFeed` takes the lines a search pass reads (one pass for search, line
index and insight). What an entry adds is history_service.insight_entries';
the values and the store protocol are history_service.insight_model's.

The index is incremental: it remembers how far it read (the end of the last
complete line) and the file's identity (device, inode, head hash: the page
token's FileIdentity). A file that only grew is read from there; one that was
rewritten (other inode, shrank, other head, offset no longer a line start) is
read again from the start. Lines go through the stripper first (payloads cut
at a small inline limit) and are parsed one at a time, and changes are
written in batches, so memory stays bounded on multi-GB sessions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from history_service.errors import FileRewrittenError
from history_service.insight_entries import RolloutUsage, add_entry, add_rollout_entry
from history_service.insight_model import IndexDelta, IndexState, Insight, InsightStore
from history_service.lines import MediaMode, RawLine, is_blank, iter_lines_forward, serve_line
from scrollback.contract.stripping import StrippedLine, parse_json_object
from scrollback.layouts import CODEX
from scrollback.linefile import NEWLINE, ByteSource, FileIdentity, LineFile
from scrollback.transcripts import TranscriptFile, TranscriptSource

# Payloads at or over this many bytes are cut before a line is parsed: the
# index never needs them, and the parse stays small.
INSIGHT_INLINE_LIMIT = 1024
# Changes are written (and the offset advanced) after this many lines or bytes.
BATCH_LINES = 5000
BATCH_BYTES = 64 * 1024 * 1024


class InsightIndex:
    """Brings the insight index of a transcript up to date, and reads it."""

    def __init__(self, root: TranscriptSource, store: InsightStore, *, max_line_size: int) -> None:
        self._root = root
        self._store = store
        self._max_line_size = max_line_size
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._waiting: dict[tuple[str, str], int] = {}  # refreshes waiting for a file's lock
        # Per rollout, its running usage state where its index stands (see RolloutUsage).
        self._rollouts: dict[tuple[str, str], RolloutUsage] = {}
        self.lines_read = 0  # lines parsed, for tests and benchmarks
        self.batch_lines = BATCH_LINES

    def _lock_for(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            if len(self._locks) > 10_000:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            return self._locks.setdefault(key, threading.Lock())

    def refresh(self, transcript: TranscriptFile) -> Insight:
        """Index what the file gained since last time (all of it if rewritten); the totals."""
        key = (transcript.project_dir, transcript.unique_id)
        lock = self._lock_for(key)
        if not lock.acquire(blocking=False):
            # Held by an indexing pass's feed, maybe: it hands over at its next batch.
            with self._locks_guard:
                self._waiting[key] = self._waiting.get(key, 0) + 1
            try:
                lock.acquire()
            finally:
                with self._locks_guard:
                    self._waiting[key] -= 1
                    if not self._waiting[key]:
                        del self._waiting[key]

        def catch_up(handle: ByteSource) -> None:
            for _ in range(3):  # another replica may move the state under us
                if self._catch_up(handle, key, transcript.source == CODEX):
                    break

        try:
            # The version listed (no HEAD for a bucket): what the listing shows beside it.
            self._root.read_listed(transcript, catch_up)
        finally:
            lock.release()
        return self._store.insight(*key) or Insight()

    def _wanted(self, key: tuple[str, str]) -> bool:
        """True while a refresh waits for this file's lock."""
        with self._locks_guard:
            return key in self._waiting

    def _catch_up(self, fd: ByteSource, key: tuple[str, str], rollout: bool = False) -> bool:
        feed = self.feed(fd, key, rollout)
        if feed is None:
            return True
        for raw in iter_lines_forward(fd, feed.start, feed.size, self._max_line_size):
            served = None
            if not is_blank(raw):
                served = serve_line(
                    raw, MediaMode.DEFERRED, INSIGHT_INLINE_LIMIT, self._max_line_size
                )
            line = None if served is None else served.stripped
            entry = None if line is None or line.oversize else parse_json_object(line.json)
            if not feed.line(raw, line, entry):
                break
        return feed.finish()

    def try_feed(
        self, fd: ByteSource, key: tuple[str, str], rollout: bool = False
    ) -> InsightFeed | None:
        """`feed` for a reader of the whole file (the indexing pass), holding the file's lock
        until the feed's `release`; None when up to date, or when a refresh holds the lock
        (it reads the file itself). A refresh meanwhile waits, then finds it up to date.
        """
        lock = self._lock_for(key)
        if not lock.acquire(blocking=False):
            return None
        try:
            feed = self.feed(fd, key, rollout)
        except BaseException:
            lock.release()
            raise
        if feed is None:
            lock.release()
        else:
            feed.lock = lock
        return feed

    def feed(
        self, fd: ByteSource, key: tuple[str, str], rollout: bool = False
    ) -> InsightFeed | None:
        """A feed to bring the index of the open file (a Codex rollout if `rollout`) up to
        date; None if it is.

        The caller hands it the lines from `InsightFeed.start` to `InsightFeed.size`.
        """
        base = self._store.state(*key)
        reset = False
        offset = 0
        identity = FileIdentity.of(fd, self._root.version)
        if base is not None:
            try:
                identity = base.identity.check(fd, 0, self._root.version)
                # The index ends after a newline, or after a complete unterminated
                # last line (a closing brace): anything else there is a rewrite.
                if base.offset and LineFile(fd).read(1, base.offset - 1) not in (NEWLINE, b"}"):
                    raise FileRewrittenError()
                offset = base.offset
            except FileRewrittenError:
                reset = True
        if base is not None and not reset and offset >= identity.size:
            return None
        state: RolloutUsage | None = None
        if rollout:
            state = self._rollouts.get(key)
            if state is None or state.offset != offset or reset:
                # No running state for where the index stands: read it all again.
                state, offset = RolloutUsage(), 0
                reset = base is not None
            self._rollouts[key] = state
        return InsightFeed(self, key, base, reset, identity, offset, state)

    def _count(
        self,
        delta: IndexDelta,
        line: StrippedLine,
        entry: dict[str, Any] | None,
        rollout: RolloutUsage | None,
    ) -> None:
        self.lines_read += 1
        if rollout is None:
            add_entry(delta, entry, line.type, line.image_count, line.timestamp)
            return
        photos = line.image_count if line.type == "response_item" else 0
        add_entry(delta, None, line.type, photos, line.timestamp)
        if entry is not None:
            add_rollout_entry(delta, entry, rollout)

    def _applied(
        self,
        key: tuple[str, str],
        base: IndexState | None,
        reset: bool,
        delta: IndexDelta,
        moved: IndexState,
        rollout: RolloutUsage | None,
    ) -> bool:
        """Apply a delta; a rollout's running state follows the index, or is dropped."""
        if not self._store.apply(*key, base, reset, delta, moved):
            self._rollouts.pop(key, None)
            return False
        if rollout is not None:
            rollout.offset = moved.offset
        return True

    def links(self, transcript: TranscriptFile) -> dict[str, str]:
        """The sub-agent links the index knows for a parent transcript (no refresh)."""
        return self._store.links(transcript.project_dir, transcript.unique_id)

    def parent_of(self, transcript: TranscriptFile) -> tuple[str, str] | None:
        """(parent session id, tool_use id) of a sub-agent, as the index knows it."""
        return self._store.parent_of(transcript.project_dir, transcript.unique_id)


class InsightFeed:
    """Counts a file's lines into its insight index as a caller reads them.

    The caller strips each line (payloads cut at INSIGHT_INLINE_LIMIT) and
    parses it once, then hands both here (`line`), so one read of the file can
    feed other indexes too. Changes are written in batches, each a
    compare-and-set on the stored state.
    """

    def __init__(
        self,
        index: InsightIndex,
        key: tuple[str, str],
        base: IndexState | None,
        reset: bool,
        identity: FileIdentity,
        offset: int,
        rollout: RolloutUsage | None = None,
    ) -> None:
        self._index = index
        self._rollout = rollout
        self._key = key
        self._current = base
        self._reset = reset
        self._identity = identity
        self._offset = offset
        self._delta = IndexDelta()
        self.start = offset
        self.size = identity.size
        self.active = True
        self.lock: threading.Lock | None = None  # held for the feed (`try_feed`)

    def release(self) -> None:
        """Let go of the file's lock, if the feed holds it (again: nothing)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def line(self, raw: RawLine, line: StrippedLine | None, entry: dict[str, Any] | None) -> bool:
        """Count one line (`line` None: blank or not a JSON object); False once done."""
        if not self.active or raw.start < self._offset:
            return self.active
        if raw.start >= self.size:
            return False
        if not raw.terminated:
            # The last line counts once it is a complete object (docs/contract.md §1:
            # no prefix of a line is one); a half-written line waits.
            if line is not None:
                self._index._count(self._delta, line, entry, self._rollout)
                self._offset = raw.end
            return False
        if line is not None:
            self._index._count(self._delta, line, entry, self._rollout)
        delta = self._delta
        delta.lines += 1
        delta.bytes += raw.next_start - raw.start
        self._offset = raw.next_start
        if delta.lines >= self._index.batch_lines or delta.bytes >= BATCH_BYTES:
            state = IndexState.at(self._identity, self._offset)
            if not self._index._applied(
                self._key, self._current, self._reset, delta, state, self._rollout
            ):
                self.active = False
                return False
            self._current, self._reset, self._delta = state, False, IndexDelta()
            if self.lock is not None and self._index._wanted(self._key):
                # A GetSession waits: it goes on from here itself, not after the whole pass.
                self.active = False
                self.release()
                return False
        return True

    def finish(self) -> bool:
        """Write what is left; False if another indexer moved the state first (or it handed
        the file over to a refresh)."""
        if not self.active:
            return False
        current = self._current
        if current is not None and not self._reset and self._offset == current.offset:
            return True  # no new complete line: nothing to write
        state = IndexState.at(self._identity, self._offset)
        return self._index._applied(
            self._key, current, self._reset, self._delta, state, self._rollout
        )


@dataclass(frozen=True, slots=True)
class SessionDetail:
    """A session's insight, its sub-agents' totals and its place in a sub-agent tree."""

    insight: Insight | None
    subagent_insight: Insight | None
    subagent_count: int
    parent_session_id: str
    parent_tool_use_id: str
    # Whether a chat key is bound to the session (GetSession only).
    followed: bool = False


def subagents_of(
    transcript: TranscriptFile, files: Iterable[TranscriptFile], links: dict[str, str]
) -> list[TranscriptFile]:
    """The sub-agent transcripts of a session: in its `subagents` dir, or linked from its calls."""
    linked = set(links.values())
    return [
        f
        for f in files
        if (f.project_dir, f.source) == (transcript.project_dir, transcript.source)
        and f.is_subagent
        and f.session_id != transcript.session_id
        and (
            f.parent_session_id == transcript.session_id
            or (not f.parent_session_id and f.session_id in linked)
        )
    ]
