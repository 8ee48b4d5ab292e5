"""Watching a session: newly completed transcript lines and newly accepted messages.

A watch starts from a position (file identity, byte offset, last accepted
seq) and each event carries the position after it, so a reconnecting client
resumes with no gap and no duplicate. The file is polled by `fstat` every
`poll_seconds` and only its new bytes are read; a rewritten or truncated file
ends the watch (FileRewrittenError). Accepted messages come from the store by
seq: bus events only wake the watch up, so an event lost or reordered on the
bus can never cause a gap. A chat key is looked up in the watching
principal's namespace only (scrollback.server.auth.namespace): another principal's
messages on the same key never reach the watch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from history_service.accept import AcceptedRecord
from history_service.bus import AcceptedBus, BusOverflowError
from history_service.errors import FileRewrittenError
from history_service.lines import (
    TAIL_SCANS,
    MediaMode,
    RawLine,
    ServedLine,
    is_blank,
    iter_lines_forward,
    serve_line,
)
from history_service.store.base import AcceptedMessageStore
from history_service.tokens import TokenCodec, WatchPosition
from history_service.windows import open_transcript
from scrollback.linefile import ByteSource, FileIdentity, LineFile
from scrollback.principals import Principal, namespace
from scrollback.transcripts import SessionNotFoundError, TranscriptSource

MAX_LINES_PER_POLL = 200
MAX_BYTES_PER_POLL = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WatchEntry:
    """A newly completed transcript line."""

    line: ServedLine
    position: str
    session_id: str


@dataclass(frozen=True, slots=True)
class WatchAccepted:
    """A newly accepted message."""

    record: AcceptedRecord
    position: str


@dataclass(frozen=True, slots=True)
class WatchHeartbeat:
    """Nothing happened for a while."""

    position: str
    sent_at: float


WatchEvent = WatchEntry | WatchAccepted | WatchHeartbeat


def position_scope(session_id: str, chat_key: str) -> str:
    """What a position is bound to: the session id, or the chat key."""
    return session_id if session_id else "key:" + chat_key


def complete_end(fd: ByteSource, identity: FileIdentity, max_line_size: int) -> int:
    """Where the complete lines end now: after the tail if it is a complete object.

    The tail's start is searched back only as far as the last search of this
    file version (TAIL_SCANS): a long tail is read once, not at every start.
    """
    size = identity.size
    start = TAIL_SCANS.tail_start(fd, identity.version, size)
    if start < size and size - start <= max_line_size:
        data = LineFile(fd).read(size - start, start)
        if serve_line(
            RawLine(start, size, data, False), MediaMode.DEFERRED, 1 << 30, max_line_size
        ):
            return size
    return start


@dataclass
class _State:
    principal: Principal | None
    owner: str
    session_id: str
    chat_key: str
    identity: FileIdentity
    offset: int
    last_seq: int
    signature: tuple[int, int, int] | None = None
    skipped: int = field(default=0)


class SessionWatcher:
    """Produces the events of watches."""

    def __init__(
        self,
        root: TranscriptSource,
        codec: TokenCodec,
        store: AcceptedMessageStore,
        bus: AcceptedBus,
        *,
        max_line_size: int,
        poll_seconds: float,
        heartbeat_seconds: float,
    ) -> None:
        self._root = root
        self._codec = codec
        self._store = store
        self._bus = bus
        self._max_line_size = max_line_size
        self._poll = poll_seconds
        self._heartbeat = heartbeat_seconds

    async def start(
        self, principal: Principal | None, session_id: str, chat_key: str, position: str
    ) -> tuple[str, WatchPosition]:
        """Check the request and return (scope, start position); raises the domain errors."""
        scope = position_scope(session_id, chat_key)
        if position:
            return scope, self._codec.parse_position(scope, position)
        return scope, await asyncio.to_thread(self._now, principal, session_id, chat_key)

    def _now(self, principal: Principal | None, session_id: str, chat_key: str) -> WatchPosition:
        last_seq = self._store.last_seq()
        target = session_id or self._store.binding(namespace(principal), chat_key) or ""
        if not target:
            return WatchPosition(FileIdentity.null(), 0, last_seq)
        try:
            transcript = self._root.resolve(target, principal)
        except SessionNotFoundError:
            if session_id:
                raise
            return WatchPosition(FileIdentity.null(), 0, last_seq)
        fd = open_transcript(self._root, transcript)
        try:
            identity = FileIdentity.of(fd, self._root.version)
            return WatchPosition(
                identity, complete_end(fd, identity, self._max_line_size), last_seq
            )
        finally:
            fd.close()

    async def events(
        self,
        principal: Principal | None,
        session_id: str,
        chat_key: str,
        scope: str,
        start: WatchPosition,
        mode: MediaMode,
        inline_limit: int,
    ) -> AsyncIterator[WatchEvent]:
        """The events from `start` on, until the caller stops iterating."""
        owner = namespace(principal)
        state = _State(
            principal, owner, session_id, chat_key, start.identity, start.offset, start.last_seq
        )
        if not session_id:
            bound: str | None = await asyncio.to_thread(self._store.binding, owner, chat_key)
            state.session_id = bound or ""

        def position() -> str:
            return self._codec.position(
                scope, WatchPosition(state.identity, state.offset, state.last_seq)
            )

        subscription = self._bus.subscribe()
        try:
            last_event = time.monotonic()
            wake = True  # look at the store on the first round
            while True:
                if wake:
                    for accepted in await asyncio.to_thread(self._accepted_since, state):
                        state.last_seq = accepted.seq
                        yield WatchAccepted(accepted, position())
                        last_event = time.monotonic()
                    wake = False
                lines, more = await asyncio.to_thread(self._read_new, state, mode, inline_limit)
                for served, after, identity in lines:
                    state.offset, state.identity = after, identity
                    yield WatchEntry(served, position(), state.session_id)
                    last_event = time.monotonic()
                try:
                    record: AcceptedRecord | None = await subscription.get(
                        0 if more else self._poll
                    )
                    while record is not None:
                        if self._concerns(state, record) and record.seq > state.last_seq:
                            wake = True
                        record = await subscription.get(0)
                except BusOverflowError:
                    wake = True
                if time.monotonic() - last_event >= self._heartbeat:
                    yield WatchHeartbeat(position(), time.time())
                    last_event = time.monotonic()
        finally:
            subscription.close()

    @staticmethod
    def _concerns(state: _State, record: AcceptedRecord) -> bool:
        if state.session_id and record.session_id == state.session_id:
            return True
        return bool(state.chat_key) and record.chat_key == state.chat_key

    def _accepted_since(self, state: _State) -> list[AcceptedRecord]:
        if not state.session_id and state.chat_key:
            state.session_id = self._store.binding(state.owner, state.chat_key) or ""
        found: list[AcceptedRecord] = []
        after = state.last_seq
        while True:
            batch = self._store.since(state.owner, state.session_id, state.chat_key, after)
            if not batch:
                return found
            found.extend(batch)
            after = batch[-1].seq

    def _read_new(
        self, state: _State, mode: MediaMode, inline_limit: int
    ) -> tuple[list[tuple[ServedLine, int, FileIdentity]], bool]:
        """New complete lines after state.offset: (line, offset after it, identity), more-to-read."""
        if not state.session_id and state.chat_key:
            state.session_id = self._store.binding(state.owner, state.chat_key) or ""
        if not state.session_id:
            return [], False
        try:
            transcript = self._root.resolve(state.session_id, state.principal)
        except SessionNotFoundError:
            if state.identity.is_null:
                return [], False
            raise
        fd = open_transcript(self._root, transcript)
        try:
            stat = fd.stat()
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if signature == state.signature:
                return [], False
            current = state.identity.check(fd, 0, self._root.version)
            if state.offset > current.size:
                raise FileRewrittenError()
            found: list[tuple[ServedLine, int, FileIdentity]] = []
            offset = state.offset
            scanned = 0
            more = False
            # A poll searches at most MAX_BYTES_PER_POLL new bytes, from where the
            # last search of an unterminated tail stopped (TAIL_SCANS).
            clear = TAIL_SCANS.clear_to(fd, current.version, offset, current.size)
            end = min(current.size, clear + MAX_BYTES_PER_POLL)
            lines = iter_lines_forward(fd, offset, end, self._max_line_size, clear)
            for raw in lines:
                if len(found) >= MAX_LINES_PER_POLL or scanned >= MAX_BYTES_PER_POLL:
                    more = True
                    break
                scanned += raw.size + 1
                if not raw.terminated:
                    if raw.end < current.size:
                        more = True  # cut by the poll's bound: the line goes on
                    elif not is_blank(raw) and raw.data is not None:
                        served = serve_line(raw, mode, inline_limit, self._max_line_size)
                        if served is not None:
                            offset = raw.end
                            found.append((served, offset, current))
                    if offset == raw.start:
                        TAIL_SCANS.remember(fd, current.version, raw.start, raw.end)
                    break
                offset = raw.next_start
                if is_blank(raw):
                    continue
                served = serve_line(raw, mode, inline_limit, self._max_line_size)
                if served is None:
                    state.skipped += 1
                    continue
                found.append((served, offset, current))
            if not found:
                # Only blank or skipped lines: move on silently.
                state.offset, state.identity = offset, current
            if not more:
                state.signature = signature
            return found, more
        finally:
            fd.close()
