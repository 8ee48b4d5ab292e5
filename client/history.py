"""The synchronous history client: windows, whole-session paging, bootstrap, accept, watch.

    with HistoryClient("127.0.0.1:50051") as history:
        for entry in history.iter_window("abc"):        # the whole session, lazily
            print(entry.uuid, entry.json[:80])
        for event in history.watch("abc", position):    # resumes itself after drops
            ...

Every call has a deadline (`Deadlines`), idempotent calls are retried on
UNAVAILABLE/DEADLINE_EXCEEDED with exponential backoff and jitter
(`RetryPolicy`), and failures raise the typed exceptions of `client.errors`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc

from client._base import SyncChannelClient
from client._core import (
    DEFAULT_DEADLINES,
    DEFAULT_RETRY,
    WINDOW_BATCH_BYTES,
    Deadlines,
    RetryPolicy,
    WatchAssembler,
    WatchEvent,
    Window,
    WindowAssembler,
    accept_request,
    history_addr,
    new_txn_id,
    rpc_code,
)
from client._retry import retry_sync
from client.errors import from_rpc_error
from client.tls import TlsOptions
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.search.v1 import search_pb2 as spb
from scrollback.search.v1 import search_pb2_grpc

WATCH_RETRY = RetryPolicy(max_attempts=8, initial_backoff=0.05, max_backoff=2.0)
# A watch's stream may end with these when the server goes away.
# A server that stops ends its streams UNAVAILABLE or, as its calls are cancelled, CANCELLED
# (a watch's own cancel never raises into its loop): both are resumed.
WATCH_RESUME_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


def direction_of(oldest_first: bool) -> hpb.ReadDirection.ValueType:
    """The ReadDirection for a flag."""
    return hpb.READ_DIRECTION_OLDEST_FIRST if oldest_first else hpb.READ_DIRECTION_LATEST_FIRST


def window_request(
    session_id: str,
    page_size: int,
    page_token: str,
    oldest_first: bool,
    media_mode: hpb.MediaMode.ValueType,
    inline_limit_bytes: int,
) -> hpb.ReadWindowRequest:
    """The ReadWindowRequest of `read_window` (sync and asyncio)."""
    return hpb.ReadWindowRequest(
        session_id=session_id,
        page_size=page_size,
        page_token=page_token,
        direction=direction_of(oldest_first),
        media_mode=media_mode,
        inline_limit_bytes=inline_limit_bytes,
        max_batch_bytes=WINDOW_BATCH_BYTES,
    )


@dataclass(frozen=True, slots=True)
class SearchPage:
    """One page of search hits (most relevant first, or newest first), the token of the
    next page ("" at the end), and whether the index was still being built (partial)."""

    hits: list[spb.SearchHit]
    next_page_token: str
    partial: bool = False


def search_request(
    query: str,
    *,
    project_dir: str = "",
    session_id: str = "",
    entry_types: Sequence[str] = (),
    roles: Sequence[str] = (),
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    photos: bool | None = None,
    page_size: int = 0,
    page_token: str = "",
    newest: bool = False,
) -> spb.SearchRequest:
    """The SearchRequest of `search` (sync and asyncio); naive datetimes are UTC; `newest`:
    newest first instead of most relevant first."""
    request = spb.SearchRequest(
        query=query,
        project_dir=project_dir,
        session_id=session_id,
        entry_types=list(entry_types),
        roles=list(roles),
        photos=(
            spb.PHOTO_FILTER_UNSPECIFIED
            if photos is None
            else spb.PHOTO_FILTER_WITH_PHOTOS
            if photos
            else spb.PHOTO_FILTER_WITHOUT_PHOTOS
        ),
        page_size=page_size,
        page_token=page_token,
        order=spb.SEARCH_ORDER_NEWEST if newest else spb.SEARCH_ORDER_RELEVANCE,
    )
    if start_time is not None:
        request.start_time.FromDatetime(start_time)
    if end_time is not None:
        request.end_time.FromDatetime(end_time)
    return request


def search_page(messages: Iterable[spb.SearchResponse]) -> SearchPage:
    """A page from the messages of one Search stream."""
    hits: list[spb.SearchHit] = []
    token = ""
    partial = False
    for message in messages:
        if message.HasField("hit"):
            hits.append(message.hit)
        elif message.HasField("end"):
            token, partial = message.end.next_page_token, message.end.partial
    return SearchPage(hits, token, partial)


@dataclass(frozen=True, slots=True)
class ImageList:
    """Every image and document of a session, in file order, and their totals."""

    images: list[hpb.ImageInfo]
    totals: hpb.ImageTotals


def image_list(messages: Iterable[hpb.ListImagesResponse]) -> ImageList:
    """An image list from the messages of one ListImages stream."""
    images: list[hpb.ImageInfo] = []
    totals = hpb.ImageTotals()
    for message in messages:
        if message.HasField("image"):
            images.append(message.image)
        elif message.HasField("totals"):
            totals = message.totals
    return ImageList(images, totals)


def slim_request(
    session_id: str,
    fork_session_id: str,
    downscale: bool,
    max_side: int,
    max_bytes: int,
    keep_last: int,
    include_subagents: bool,
) -> hpb.SlimSessionRequest:
    """The SlimSessionRequest of `slim_session` (sync and asyncio)."""
    return hpb.SlimSessionRequest(
        session_id=session_id,
        fork_session_id=fork_session_id,
        images=hpb.SLIM_IMAGES_DOWNSCALE if downscale else hpb.SLIM_IMAGES_TEXT,
        max_side=max_side,
        max_bytes=max_bytes,
        keep_last=keep_last,
        include_subagents=include_subagents,
    )


class HistoryClient(SyncChannelClient):
    """A typed, retrying client of scrollback.history.v1.HistoryService."""

    def __init__(
        self,
        addr: str | None = None,
        *,
        channel: grpc.Channel | None = None,
        deadlines: Deadlines = DEFAULT_DEADLINES,
        retry: RetryPolicy = DEFAULT_RETRY,
        watch_retry: RetryPolicy = WATCH_RETRY,
        interceptors: Sequence[Any] = (),
        metadata: Sequence[tuple[str, str]] = (),
        token: str | None = None,
        rng: random.Random | None = None,
        tls: TlsOptions | bool | None = None,
    ) -> None:
        super().__init__(history_addr(addr), channel, interceptors, metadata, token, rng, tls)
        self.stub = history_pb2_grpc.HistoryServiceStub(self._intercepted)
        self.search_stub = search_pb2_grpc.SearchServiceStub(self._intercepted)
        self.deadlines = deadlines
        self.retry = retry
        self.watch_retry = watch_retry

    def list_sessions(
        self, *, page_size: int = 0, page_token: str = "", project_dir: str = ""
    ) -> hpb.ListSessionsResponse:
        """One page of sessions, newest first."""
        request = hpb.ListSessionsRequest(
            page_size=page_size, page_token=page_token, project_dir=project_dir
        )
        return retry_sync(
            lambda: self.stub.ListSessions(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        )

    def get_session(self, session_id: str) -> hpb.Session:
        """One session with its insight (usage, cost, entry counts) and sub-agent totals."""
        request = hpb.GetSessionRequest(session_id=session_id)
        return retry_sync(
            lambda: self.stub.GetSession(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        ).session

    def iter_sessions(self, *, project_dir: str = "", page_size: int = 0) -> Iterator[hpb.Session]:
        """Every session under the root, newest first, page by page."""
        token = ""
        while True:
            page = self.list_sessions(
                page_size=page_size, page_token=token, project_dir=project_dir
            )
            yield from page.sessions
            token = page.next_page_token
            if not token:
                return

    def search(
        self,
        query: str,
        *,
        project_dir: str = "",
        session_id: str = "",
        entry_types: Sequence[str] = (),
        roles: Sequence[str] = (),
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        photos: bool | None = None,
        page_size: int = 0,
        page_token: str = "",
        newest: bool = False,
    ) -> SearchPage:
        """One page of search hits, most relevant first (`newest`: newest first), served
        by the history server."""
        request = search_request(
            query,
            project_dir=project_dir,
            session_id=session_id,
            entry_types=entry_types,
            roles=roles,
            start_time=start_time,
            end_time=end_time,
            photos=photos,
            page_size=page_size,
            page_token=page_token,
            newest=newest,
        )
        return retry_sync(
            lambda: search_page(
                self.search_stub.Search(
                    request, timeout=self.deadlines.stream, metadata=self.metadata
                )
            ),
            self.retry,
            self._rng,
            self.addr,
        )

    def iter_search(self, query: str, **filters: Any) -> Iterator[spb.SearchHit]:
        """Every hit of a query, page by page (filters and order as `search`)."""
        token = ""
        while True:
            page = self.search(query, page_token=token, **filters)
            yield from page.hits
            token = page.next_page_token
            if not token:
                return

    def slim_session(
        self,
        session_id: str,
        *,
        fork_session_id: str = "",
        downscale: bool = False,
        max_side: int = 0,
        max_bytes: int = 0,
        keep_last: int = 0,
        include_subagents: bool = True,
    ) -> Iterator[hpb.SlimSessionResponse]:
        """A slim copy of a session and its sub-agents, as the server streams it.

        Not retried and without a deadline (a copy takes as long as its file):
        the caller writes the pieces as they come. Closing the iterator
        cancels the call.
        """
        request = slim_request(
            session_id,
            fork_session_id,
            downscale,
            max_side,
            max_bytes,
            keep_last,
            include_subagents,
        )
        # No deadline, as for a watch: a copy takes as long as its file (cancel to stop).
        call = self.stub.SlimSession(request, metadata=self.metadata)
        try:
            yield from call
        except grpc.RpcError as error:
            raise from_rpc_error(error, addr=self.addr) from None
        finally:
            call.cancel()  # type: ignore[no-untyped-call]

    def list_images(self, session_id: str, *, include_subagents: bool = True) -> ImageList:
        """Every image and document of a session (and its sub-agents), with their problems."""
        request = hpb.ListImagesRequest(session_id=session_id, include_subagents=include_subagents)
        return retry_sync(
            lambda: image_list(
                self.stub.ListImages(request, timeout=self.deadlines.stream, metadata=self.metadata)
            ),
            self.retry,
            self._rng,
            self.addr,
        )

    def read_window(
        self,
        session_id: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        oldest_first: bool = False,
        media_mode: hpb.MediaMode.ValueType = hpb.MEDIA_MODE_DEFERRED,
        inline_limit_bytes: int = 0,
    ) -> Window:
        """One page with whole entries (json chunks reassembled); retried as a whole."""
        request = window_request(
            session_id, page_size, page_token, oldest_first, media_mode, inline_limit_bytes
        )

        def attempt() -> Window:
            assembler = WindowAssembler()
            for message in self.stub.ReadWindow(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            ):
                assembler.feed(message)
            return assembler.window()

        return retry_sync(attempt, self.retry, self._rng, self.addr)

    def iter_windows(
        self, session_id: str, *, oldest_first: bool = True, page_size: int = 0, **options: Any
    ) -> Iterator[Window]:
        """Every page of a session, fetched one at a time as the caller advances."""
        token = ""
        while True:
            window = self.read_window(
                session_id,
                page_size=page_size,
                page_token=token,
                oldest_first=oldest_first,
                **options,
            )
            yield window
            token = window.next_page_token
            if not token:
                return

    def iter_window(
        self, session_id: str, *, oldest_first: bool = True, page_size: int = 0, **options: Any
    ) -> Iterator[hpb.Entry]:
        """Every entry of a session, lazily, page by page.

        Oldest first (the default) yields the whole file in order; latest first
        yields the newest page first, each page in file order.
        """
        for window in self.iter_windows(
            session_id, oldest_first=oldest_first, page_size=page_size, **options
        ):
            yield from window.entries

    def bootstrap(self, session_id: str = "", *, chat_key: str = "", page_size: int = 0) -> Window:
        """Pending messages and the watch position (`.header`), then the latest window."""
        request = hpb.BootstrapRequest(
            session_id=session_id,
            chat_key=chat_key,
            page_size=page_size,
            max_batch_bytes=WINDOW_BATCH_BYTES,
        )

        def attempt() -> Window:
            assembler = WindowAssembler()
            for message in self.stub.Bootstrap(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            ):
                assembler.feed(message)
            return assembler.window()

        return retry_sync(attempt, self.retry, self._rng, self.addr)

    def accept_message(
        self,
        text: str,
        *,
        session_id: str | None = None,
        chat_key: str | None = None,
        attachments: Iterable[Any] = (),
        txn_id: str | None = None,
    ) -> hpb.AcceptMessageResponse:
        """Record a message; retried with the same client_txn_id, so it is accepted once."""
        request = accept_request(
            txn_id or new_txn_id(),
            text,
            attachments,
            session_id=session_id,
            chat_key=chat_key,
        )
        return retry_sync(
            lambda: self.stub.AcceptMessage(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        )

    def bind_chat_key(self, chat_key: str, session_id: str) -> int:
        """Bind a chat key to its session id (idempotent); how many messages moved."""
        request = hpb.BindChatKeyRequest(chat_key=chat_key, session_id=session_id)
        response = retry_sync(
            lambda: self.stub.BindChatKey(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        )
        return int(response.bound_messages)

    def watch(
        self,
        session_id: str = "",
        position: str = "",
        *,
        chat_key: str = "",
        heartbeats: bool = False,
    ) -> Iterator[WatchEvent]:
        """Live events of a session from `position`, resuming itself after dropped connections.

        On UNAVAILABLE (or CANCELLED, a server stopping) the watch reconnects (backoff with jitter, the attempt
        count reset by every event) from the position after the last complete
        event it yielded, so it never yields a duplicate and never skips one.
        Heartbeats only advance the position unless `heartbeats` is true.
        Closing the generator cancels the call.
        """
        assembler = WatchAssembler(position)
        failures = 0
        while True:
            request = hpb.WatchSessionRequest(
                session_id=session_id, chat_key=chat_key, position=assembler.position
            )
            call = self.stub.WatchSession(request, metadata=self.metadata)
            try:
                for message in call:
                    event = assembler.feed(message)
                    if event is None:
                        continue
                    failures = 0
                    if event.kind != "heartbeat" or heartbeats:
                        yield event
                return
            except grpc.RpcError as error:
                assembler.reset()
                failures += 1
                code = rpc_code(error)
                if code not in WATCH_RESUME_CODES or failures >= self.watch_retry.max_attempts:
                    raise from_rpc_error(error, addr=self.addr) from None
                time.sleep(self.watch_retry.delay(failures - 1, self._rng))
            finally:
                call.cancel()  # type: ignore[no-untyped-call]
