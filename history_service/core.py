"""The history service's domain facade: what each RPC does, with no grpc in sight.

`HistoryCore` wires the transcript root, the token codec, the window reader,
the session lister, the accepted-message store, the bus and the watcher. The
servicer only translates protos to these calls and back.

Each call takes the caller's principal (None without auth) explicitly. With
auth, every session id a call names must resolve through TranscriptSource, which
only sees the caller's projects: a session outside them is NOT_FOUND, like one
that does not exist. Chat keys live in the principal's namespace
(scrollback.server.auth.namespace), and attachments must be blobs the principal may
read (scrollback.state.blob_access, the media service's rule for ReadMedia).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass, replace

from history_service.accept import AcceptedRecord, validate_accept
from history_service.bus import AcceptedBus
from history_service.config import HistoryConfig
from history_service.entry_cache import EntryCache
from history_service.errors import InvalidArgumentError
from history_service.gemini_images import list_gemini_images
from history_service.image_list import ImageRecord, list_images
from history_service.image_list_opencode import list_opencode_images
from history_service.insight import InsightIndex, SessionDetail, subagents_of
from history_service.insight_model import Insight, InsightStore
from history_service.latest_windows import LatestWindows
from history_service.sessions import SessionInfo, SessionLister
from history_service.slim import (
    SlimEvent,
    SlimFileStart,
    SlimOptions,
    SlimStart,
    SlimStats,
    SlimStep,
    file_size,
    slim_file,
)
from history_service.slim_downscale import OVER_DECODE_BUDGET, Downscale, DownscaleAnswer
from history_service.slim_gemini import slim_gemini_file
from history_service.slim_opencode import opencode_copy
from history_service.store.base import AcceptedMessageStore
from history_service.tokens import DIRECTION_LATEST_FIRST, TokenCodec, WatchPosition
from history_service.watch import SessionWatcher, position_scope
from history_service.windows import (
    Window,
    WindowParams,
    WindowReader,
    validate_inline_limit,
    validate_mode,
    validate_params,
)
from scrollback.contract.refs import GEMINI, OPENCODE, validate_id, validate_session_id
from scrollback.directory import DirectoryRoot
from scrollback.linefile import ByteSource, FileIdentity
from scrollback.lineindex import LineIndex
from scrollback.principals import Principal, namespace
from scrollback.server.decode_budget import DecodeBudget
from scrollback.server.lane import Lane
from scrollback.state.blob_access import readable_blobs
from scrollback.state.errors import StoreBusyError
from scrollback.transcripts import SessionNotFoundError, TranscriptFile, TranscriptSource


async def drive_slim_in_thread(
    steps: Generator[SlimStep, DownscaleAnswer | None, None],
    downscale: Callable[[Downscale], Awaitable[DownscaleAnswer]],
) -> AsyncIterator[SlimEvent]:
    """A slim copy's events, each step taken in a worker thread; each Downscale it asks
    for answered by `downscale` on the loop (the thread is not held while it waits)."""
    done = object()

    def step(answer: DownscaleAnswer | None) -> SlimStep | object:
        try:
            return steps.send(answer)
        except StopIteration:
            return done

    answer: DownscaleAnswer | None = None
    try:
        while True:
            item = await asyncio.to_thread(step, answer)
            answer = None
            if item is done:
                return
            if isinstance(item, Downscale):
                answer = await downscale(item)
                continue
            yield item  # type: ignore[misc]
    finally:
        await asyncio.to_thread(steps.close)


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    """The header of a bootstrap and its window (None when the transcript does not exist yet)."""

    session_id: str
    pending: list[AcceptedRecord]
    watch_position: str
    window: Window | None
    # tool_use id -> sub-agent session id, as ReadWindow links them.
    links: dict[str, str]


class HistoryCore:
    """Everything the RPCs do."""

    def __init__(
        self,
        config: HistoryConfig,
        root: TranscriptSource,
        codec: TokenCodec,
        store: AcceptedMessageStore,
        bus: AcceptedBus,
        insight_store: InsightStore,
        line_index: LineIndex | None = None,
    ) -> None:
        self.config = config
        self.line_index = line_index
        self.root = root
        self.codec = codec
        self.store = store
        self.bus = bus
        # Window reads run on a thread of their own (scrollback/server/lane.py).
        self.window_lane = Lane(name="window-lane")
        # Image decodes (slim downscales): bounded threads and memory, fair between callers.
        self.decodes = DecodeBudget(
            config.decode_threads, config.decode_memory_bytes, name="history-decode"
        )
        # Window entries kept encoded (None when its budget is 0): it wraps each window's server.
        cache = EntryCache(config.entry_cache_bytes)
        self.entry_cache = cache if cache.enabled else None
        self.reader = WindowReader(
            root,
            codec,
            max_line_size=config.max_line_size,
            max_window_bytes=config.max_window_bytes,
            line_index=line_index,
            wrap=None if self.entry_cache is None else self.entry_cache.wrap,
        )
        # Latest windows kept as sent, under the entry cache's budget and switch; only
        # over local files, whose stat (the check before a replay) is a syscall.
        self.latest_windows = (
            LatestWindows(
                config.entry_cache_bytes,
                root.stat,
                max_age=config.rescan_interval_seconds,
            )
            if self.entry_cache is not None and isinstance(root, DirectoryRoot)
            else None
        )
        self.lister = SessionLister(root, codec, insight_store)
        self.insight_store = insight_store
        self.insight = InsightIndex(root, insight_store, max_line_size=config.max_line_size)
        self.watcher = SessionWatcher(
            root,
            codec,
            store,
            bus,
            max_line_size=config.max_line_size,
            poll_seconds=config.watch_poll_seconds,
            heartbeat_seconds=config.heartbeat_seconds,
        )

    async def list_sessions(
        self, principal: Principal | None, page_size: int, page_token: str, project_dir: str
    ) -> tuple[list[tuple[SessionInfo, SessionDetail | None]], str]:
        """One page of sessions, each with its insight (None where the index failed)."""
        infos, token = await self.lister.page(principal, page_size, page_token, project_dir)
        details = await asyncio.to_thread(self._details, principal, infos)
        return list(zip(infos, details, strict=True)), token

    async def get_session(
        self, principal: Principal | None, session_id: str
    ) -> tuple[SessionInfo, SessionDetail]:
        """One session with its insight brought up to date (NOT_FOUND when not visible)."""
        validate_session_id(session_id)

        def work() -> tuple[SessionInfo, SessionDetail]:
            transcript = self.root.resolve(session_id, principal)
            try:
                info = self.lister.info_of(transcript, principal)
            except OSError:
                raise SessionNotFoundError() from None
            detail = self._detail(transcript, self.root.list(principal))
            return info, replace(detail, followed=self.store.followed(info.session_id))

        return await asyncio.to_thread(work)

    def _details(
        self, principal: Principal | None, infos: list[SessionInfo]
    ) -> list[SessionDetail | None]:
        files = self.root.list(principal)
        by_key = {(f.project_dir, self.root.name_of(f, principal)): f for f in files}
        details: list[SessionDetail | None] = []
        for info in infos:
            transcript = by_key.get((info.project_dir, info.session_id))
            detail = None
            if transcript is not None:
                # A listing never fails for the index: that session shows no insight.
                try:
                    detail = self._detail(transcript, files)
                except (LookupError, OSError, StoreBusyError):
                    detail = None
            details.append(detail)
        return details

    def _detail(self, transcript: TranscriptFile, files: list[TranscriptFile]) -> SessionDetail:
        """A transcript's insight, its sub-agents' totals and its parent link (blocking)."""
        insight = self.insight.refresh(transcript)
        parent_session_id, parent_tool_use_id = transcript.parent_session_id, ""
        if transcript.is_subagent:
            if parent_session_id:
                # The parent's tool results name their agents: index the parent first.
                for parent in files:
                    if (parent.project_dir, parent.session_id, parent.source) == (
                        transcript.project_dir,
                        parent_session_id,
                        transcript.source,
                    ):
                        self.insight.refresh(parent)
            link = self.insight.parent_of(transcript)
            # A layout parent wins; a legacy sub-agent takes the parent that links it.
            if link is not None and (not parent_session_id or link[0] == parent_session_id):
                parent_session_id, parent_tool_use_id = link
        subagents = subagents_of(transcript, files, self.insight.links(transcript))
        total: Insight | None = None
        for subagent in subagents:
            try:
                part = self.insight.refresh(subagent)
            except (LookupError, OSError):
                continue  # gone since the listing
            total = part if total is None else total + part
        return SessionDetail(insight, total, len(subagents), parent_session_id, parent_tool_use_id)

    async def read_window_with_links(
        self, principal: Principal | None, params: WindowParams
    ) -> tuple[Window, dict[str, str], TranscriptFile]:
        """A window, its session's sub-agent links and the transcript read, in one hop to the
        window lane."""

        def work() -> tuple[Window, dict[str, str], TranscriptFile]:
            window, transcript = self.reader.read_with_transcript(principal, params)
            return window, self._subagent_links(principal, transcript), transcript

        # Identical windows still queued on the lane are read once (Lane.run_shared).
        return await self.window_lane.run_shared((principal, params), work)

    def _subagent_links(
        self, principal: Principal | None, transcript: TranscriptFile
    ) -> dict[str, str]:
        """tool_use id -> sub-agent session id of a session, as the index knows them now.

        Never indexes (a window of a huge session must not wait for a full
        pass); empty when the session is unknown or the store is busy. Only
        sub-agents whose transcript the caller can open are linked (blocking).
        """
        try:
            links = self.insight.links(transcript)
        except (LookupError, ValueError, StoreBusyError):
            return {}
        if not links:
            return {}
        # One listing, not a resolve per link: a resolve miss rescans the root.
        present = {
            f.session_id
            for f in self.root.list(principal)
            if (f.project_dir, f.source) == (transcript.project_dir, transcript.source)
        }
        return {tool: agent for tool, agent in links.items() if agent in present}

    def window_params(
        self,
        session_id: str,
        page_size: int,
        page_token: str,
        direction: int,
        mode: int,
        inline_limit: int,
    ) -> WindowParams:
        """Validate a window request."""
        validate_session_id(session_id)
        return validate_params(
            session_id,
            page_size,
            page_token,
            direction,
            mode,
            inline_limit,
            default_inline_limit=self.config.default_inline_limit,
            max_line_size=self.config.max_line_size,
        )

    async def accept(
        self,
        principal: Principal | None,
        client_txn_id: str,
        session_id: str,
        chat_key: str,
        text: str,
        attachments: list[tuple[str, str, str]],
    ) -> tuple[AcceptedRecord, bool]:
        """Record a message durably, then announce it on the bus."""
        request = validate_accept(client_txn_id, session_id, chat_key, text, attachments)
        if session_id:
            # A message names an existing session (NOT_FOUND otherwise, so a typo does
            # not look like success); a new chat is keyed by chat_key until bound.
            await asyncio.to_thread(self.root.resolve, session_id, principal)
        digests = [a.sha256 for a in request.attachments]
        readable = (
            await asyncio.to_thread(
                readable_blobs,
                self.store,
                principal,
                digests,
                functools.partial(self._session_visible, principal),
            )
            if digests
            else set()
        )
        record, replayed = await asyncio.to_thread(
            self.store.accept, namespace(principal), request, readable
        )
        if not replayed:
            await self.bus.publish(record)
        return record, replayed

    async def bind(self, principal: Principal | None, chat_key: str, session_id: str) -> int:
        """Bind the caller's chat key to a session id."""
        validate_id(chat_key, "chat key")
        validate_session_id(session_id)
        await self._require_visible(principal, session_id)
        moved = await asyncio.to_thread(self.store.bind, namespace(principal), chat_key, session_id)
        return moved

    async def _require_visible(self, principal: Principal | None, session_id: str) -> None:
        """With auth, a named session must exist in one of the caller's projects."""
        if session_id and principal is not None:
            await asyncio.to_thread(self.root.resolve, session_id, principal)

    def _session_visible(self, principal: Principal | None, session_id: str) -> bool:
        """Whether the caller sees a session (blocking; the blob read rule asks it)."""
        try:
            self.root.resolve(session_id, principal)
        except (LookupError, ValueError):
            return False
        return True

    def _target(self, session_id: str, chat_key: str) -> None:
        if session_id:
            validate_session_id(session_id)
            if chat_key:
                validate_id(chat_key, "chat key")
        elif chat_key:
            validate_id(chat_key, "chat key")
        else:
            raise InvalidArgumentError("session_id or chat_key is required")

    async def bootstrap(
        self,
        principal: Principal | None,
        session_id: str,
        chat_key: str,
        page_size: int,
        mode: int,
        inline_limit: int,
    ) -> BootstrapResult:
        """Pending messages, the latest window and the watch position that continues it."""
        self._target(session_id, chat_key)
        await self._require_visible(principal, session_id)
        owner = namespace(principal)
        target = session_id
        if not target:
            bound: str | None = await asyncio.to_thread(self.store.binding, owner, chat_key)
            target = bound or ""
        params = None
        if target:
            params = self.window_params(
                target, page_size, "", DIRECTION_LATEST_FIRST, mode, inline_limit
            )
        else:
            validate_params(
                "-",
                page_size,
                "",
                DIRECTION_LATEST_FIRST,
                mode,
                inline_limit,
                default_inline_limit=self.config.default_inline_limit,
                max_line_size=self.config.max_line_size,
            )
        pending, last_seq = await asyncio.to_thread(
            self.store.pending, owner, target, "" if target else chat_key
        )
        window: Window | None = None
        links: dict[str, str] = {}
        identity, offset = FileIdentity.null(), 0
        if params is not None:
            try:
                window, links, _ = await self.read_window_with_links(principal, params)
                identity, offset = window.identity, window.newest_end
            except SessionNotFoundError:
                if not pending and not chat_key:
                    raise
        scope = position_scope(session_id, chat_key)
        position = self.codec.position(scope, WatchPosition(identity, offset, last_seq))
        return BootstrapResult(target, pending, position, window, links)

    def watch_mode(self, mode: int, inline_limit: int) -> tuple[int, int]:
        """Validate a watch's media mode and inline limit."""
        media = validate_mode(mode)
        limit = validate_inline_limit(
            inline_limit, self.config.default_inline_limit, self.config.max_line_size
        )
        return media, limit

    def check_target(self, principal: Principal | None, session_id: str, chat_key: str) -> None:
        """Validate a session id or chat key target (with auth: the session is visible)."""
        self._target(session_id, chat_key)
        if session_id and principal is not None:
            self.root.resolve(session_id, principal)

    def _with_subagents(
        self, principal: Principal | None, session_id: str, include_subagents: bool
    ) -> list[TranscriptFile]:
        """A session's transcript, then (if asked) its sub-agents' the caller can see (blocking)."""
        validate_session_id(session_id)
        transcript = self.root.resolve(session_id, principal)
        if not include_subagents:
            return [transcript]
        try:
            links = self.insight.links(transcript)
        except (LookupError, ValueError, StoreBusyError):
            links = {}
        return [transcript, *subagents_of(transcript, self.root.list(principal), links)]

    def _opened(self, files: list[TranscriptFile]) -> Iterator[tuple[TranscriptFile, ByteSource]]:
        """Each file open in turn, as a byte source (blocking); a sub-agent gone since the
        listing is left out, the session itself gone is SessionNotFoundError."""
        for transcript in files:
            try:
                handle = self.root.open(transcript)
            except SessionNotFoundError:
                if transcript is files[0]:
                    raise
                continue
            with handle:
                yield transcript, handle

    def slim_events(
        self,
        principal: Principal | None,
        session_id: str,
        options: SlimOptions,
        include_subagents: bool,
    ) -> Generator[SlimStep, DownscaleAnswer | None, None]:
        """A slim copy of a session (and its sub-agents), file by file, in pieces (blocking).

        Each file is read up to its size when its copy starts; a sub-agent gone
        since the listing is left out. Each Downscale yielded is to be answered
        (`slim` runs it under the decode budget).
        """
        files = self._with_subagents(principal, session_id, include_subagents)
        if files[0].source == OPENCODE:
            yield from opencode_copy(
                self.root,
                principal,
                files,
                self._opened(files),
                options,
                self.config.max_line_size,
            )
            return
        # A copy is named by its bare id (`codex:<id>` is no file name); its refs as listed.
        copy_id = options.fork_session_id or files[0].session_id
        yield SlimStart(session_id, files[0].project_dir, copy_id, files[0].source)
        for transcript, fd in self._opened(files):
            stat = fd.stat()
            size = file_size(fd)
            relative = _copy_path(transcript, copy_id, transcript is files[0])
            yield SlimFileStart(
                transcript.session_id,
                relative,
                transcript.is_subagent,
                size,
                getattr(stat, "st_mode", 0) & 0o777,
                stat.st_mtime_ns,
            )
            stats = SlimStats()
            name = self.root.name_of(transcript, principal)
            if transcript.source == GEMINI:
                max_line = self.config.max_line_size
                yield from slim_gemini_file(fd, size, name, options, max_line, stats)
            else:
                yield from slim_file(fd, size, name, options, self.config.max_line_size, stats)
            yield stats

    def slim(
        self,
        principal: Principal | None,
        session_id: str,
        options: SlimOptions,
        include_subagents: bool,
    ) -> AsyncIterator[SlimEvent]:
        """`slim_events`, each piece read in a worker thread, each downscale run under the
        decode budget in the caller's turn (one over the whole budget is never decoded)."""
        owner = namespace(principal)

        async def downscale(request: Downscale) -> DownscaleAnswer:
            if not self.decodes.fits(request.cost):
                return OVER_DECODE_BUDGET
            return await self.decodes.run(owner, request.cost, request.work)

        return drive_slim_in_thread(
            self.slim_events(principal, session_id, options, include_subagents), downscale
        )

    async def images(
        self, principal: Principal | None, session_id: str, include_subagents: bool
    ) -> list[ImageRecord]:
        """Every image and document of a session's message.content (and its sub-agents')."""

        def work() -> list[ImageRecord]:
            records: list[ImageRecord] = []
            files = self._with_subagents(principal, session_id, include_subagents)
            for transcript, fd in self._opened(files):
                name = self.root.name_of(transcript, principal)
                if transcript.source in (GEMINI, OPENCODE):
                    lister = (
                        list_gemini_images if transcript.source == GEMINI else list_opencode_images
                    )
                    records += lister(fd, file_size(fd), name, self.config.max_line_size)
                    continue
                records += list_images(
                    fd,
                    file_size(fd),
                    name,
                    self.config.max_line_size,
                    self.config.images_memory_bytes,
                )
            return records

        return await asyncio.to_thread(work)

    def close(self) -> None:
        """Release the bus, then the stores."""
        self.window_lane.close()
        self.decodes.close()
        self.bus.close()
        self.insight_store.close()
        self.store.close()
        if self.line_index is not None:
            self.line_index.close()


def _copy_path(transcript: TranscriptFile, copy_id: str, first: bool) -> str:
    """Where a slim copy's file goes, relative to the copy: its source's own layout (a Gemini
    session as `session-<id>.jsonl`, its sub-agents in `<id>/`)."""
    if transcript.source == GEMINI:
        if first:
            return f"session-{copy_id}.jsonl"
        return f"{copy_id}/{transcript.session_id}.jsonl"
    if first:
        return f"{copy_id}.jsonl"
    return f"{copy_id}/subagents/{transcript.session_id}.jsonl"
