"""The history service's domain facade: what each RPC does, with no grpc in sight.

`HistoryCore` wires the transcript root, the token codec, the window reader,
the session lister, the accepted-message store, the bus and the watcher. The
servicer only translates protos to these calls and back.

Each call takes the caller's principal (None without auth) explicitly. With
auth, every session id a call names must resolve through TranscriptRoot, which
only sees the caller's projects: a session outside them is NOT_FOUND, like one
that does not exist. Chat keys live in the principal's namespace
(scrollback.server.auth.namespace), and attachments must be blobs the principal may
read (scrollback.state.blob_access, the media service's rule for ReadMedia).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from history_service.accept import AcceptedRecord, validate_accept
from history_service.bus import AcceptedBus
from history_service.config import HistoryConfig
from history_service.errors import InvalidArgumentError
from history_service.sessions import SessionInfo, SessionLister
from history_service.store import AcceptedMessageStore
from history_service.tokens import (
    DIRECTION_LATEST_FIRST,
    FileIdentity,
    TokenCodec,
    WatchPosition,
)
from history_service.watch import SessionWatcher, position_scope
from history_service.windows import (
    Window,
    WindowParams,
    WindowReader,
    validate_inline_limit,
    validate_mode,
    validate_params,
)
from scrollback.contract.refs import validate_id
from scrollback.lineindex import LineIndex
from scrollback.principals import Principal, namespace
from scrollback.state.blob_access import readable_blobs
from scrollback.transcripts import SessionNotFoundError, TranscriptRoot


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    """The header of a bootstrap and its window (None when the transcript does not exist yet)."""

    session_id: str
    pending: list[AcceptedRecord]
    watch_position: str
    window: Window | None


class HistoryCore:
    """Everything the RPCs do."""

    def __init__(
        self,
        config: HistoryConfig,
        root: TranscriptRoot,
        codec: TokenCodec,
        store: AcceptedMessageStore,
        bus: AcceptedBus,
        line_index: LineIndex | None = None,
    ) -> None:
        self.config = config
        self.line_index = line_index
        self.root = root
        self.codec = codec
        self.store = store
        self.bus = bus
        self.reader = WindowReader(
            root,
            codec,
            max_line_size=config.max_line_size,
            max_window_bytes=config.max_window_bytes,
            line_index=line_index,
        )
        self.lister = SessionLister(root, codec)
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
        self, page_size: int, page_token: str, project_dir: str
    ) -> tuple[list[SessionInfo], str]:
        """One page of sessions."""
        return await self.lister.page(page_size, page_token, project_dir)

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
        validate_id(session_id, "session id")
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

    async def read_window(self, params: WindowParams) -> Window:
        """One window."""
        return await self.reader.read(params)

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
        validate_id(session_id, "session id")
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
            validate_id(session_id, "session id")
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
        identity, offset = FileIdentity.null(), 0
        if params is not None:
            try:
                window = await self.read_window(params)
                identity, offset = window.identity, window.newest_end
            except SessionNotFoundError:
                if not pending and not chat_key:
                    raise
        scope = position_scope(session_id, chat_key)
        position = self.codec.position(scope, WatchPosition(identity, offset, last_seq))
        return BootstrapResult(target, pending, position, window)

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

    def close(self) -> None:
        """Release the bus, then the stores."""
        self.bus.close()
        self.store.close()
        if self.line_index is not None:
            self.line_index.close()
