"""The asyncio clients: the same calls as client.history / client.media / client.client.

    async with AsyncClient() as sb:
        async for entry in sb.history.iter_window("abc"):
            ...
        async for event in sb.history.watch("abc", position):
            ...

They share the pure logic (retry policy, stream assemblers, cache, uploads)
of `client._core`, so paging, chunk reassembly, watch resumption, media
verification and caching behave exactly as in the sync clients.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from client._base import AsyncChannelClient, AsyncClosing
from client._core import (
    DEFAULT_DEADLINES,
    DEFAULT_RETRY,
    WINDOW_BATCH_BYTES,
    Deadlines,
    Media,
    MediaCache,
    ReadProgress,
    RetryPolicy,
    Upload,
    WatchAssembler,
    WatchEvent,
    Window,
    WindowAssembler,
    accept_request,
    fetch_key_of,
    history_addr,
    media_addr,
    new_txn_id,
    prepare_upload,
    rpc_code,
    selector_of,
    thumbnail_size_of,
)
from client._retry import retry_async
from client.errors import DataLoss, from_rpc_error
from client.history import (
    WATCH_RESUME_CODES,
    WATCH_RETRY,
    ImageList,
    SearchPage,
    image_list,
    search_page,
    search_request,
    slim_request,
    window_request,
)
from client.media import ImageSource, MediaTarget, stat_error
from client.tls import TlsOptions
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from scrollback.search.v1 import search_pb2 as spb
from scrollback.search.v1 import search_pb2_grpc


class AsyncHistoryClient(AsyncChannelClient):
    """The asyncio twin of client.history.HistoryClient."""

    def __init__(
        self,
        addr: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
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
        self.stub = history_pb2_grpc.HistoryServiceStub(self._channel)
        self.search_stub = search_pb2_grpc.SearchServiceStub(self._channel)
        self.deadlines = deadlines
        self.retry = retry
        self.watch_retry = watch_retry

    async def list_sessions(
        self, *, page_size: int = 0, page_token: str = "", project_dir: str = ""
    ) -> hpb.ListSessionsResponse:
        """One page of sessions, newest first."""
        request = hpb.ListSessionsRequest(
            page_size=page_size, page_token=page_token, project_dir=project_dir
        )

        async def attempt() -> hpb.ListSessionsResponse:
            return await self.stub.ListSessions(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            )

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def get_session(self, session_id: str) -> hpb.Session:
        """One session with its insight (usage, cost, entry counts) and sub-agent totals."""
        request = hpb.GetSessionRequest(session_id=session_id)

        async def attempt() -> hpb.GetSessionResponse:
            return await self.stub.GetSession(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            )

        return (await retry_async(attempt, self.retry, self._rng, self.addr)).session

    async def iter_sessions(
        self, *, project_dir: str = "", page_size: int = 0
    ) -> AsyncIterator[hpb.Session]:
        """Every session under the root, newest first."""
        token = ""
        while True:
            page = await self.list_sessions(
                page_size=page_size, page_token=token, project_dir=project_dir
            )
            for session in page.sessions:
                yield session
            token = page.next_page_token
            if not token:
                return

    async def search(
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

        async def attempt() -> SearchPage:
            call = self.search_stub.Search(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            )
            return search_page([message async for message in call])

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def iter_search(self, query: str, **filters: Any) -> AsyncIterator[spb.SearchHit]:
        """Every hit of a query, page by page (filters and order as `search`)."""
        token = ""
        while True:
            page = await self.search(query, page_token=token, **filters)
            for hit in page.hits:
                yield hit
            token = page.next_page_token
            if not token:
                return

    async def slim_session(
        self,
        session_id: str,
        *,
        fork_session_id: str = "",
        downscale: bool = False,
        max_side: int = 0,
        max_bytes: int = 0,
        keep_last: int = 0,
        include_subagents: bool = True,
    ) -> AsyncIterator[hpb.SlimSessionResponse]:
        """A slim copy of a session and its sub-agents, as the server streams it (not retried)."""
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
            async for message in call:
                yield message
        except grpc.RpcError as error:
            raise from_rpc_error(error, addr=self.addr) from None
        finally:
            call.cancel()

    async def list_images(self, session_id: str, *, include_subagents: bool = True) -> ImageList:
        """Every image and document of a session (and its sub-agents), with their problems."""
        request = hpb.ListImagesRequest(session_id=session_id, include_subagents=include_subagents)

        async def attempt() -> ImageList:
            call = self.stub.ListImages(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            )
            return image_list([message async for message in call])

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def read_window(
        self,
        session_id: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        oldest_first: bool = False,
        media_mode: hpb.MediaMode.ValueType = hpb.MEDIA_MODE_DEFERRED,
        inline_limit_bytes: int = 0,
    ) -> Window:
        """One page with whole entries; retried as a whole."""
        request = window_request(
            session_id, page_size, page_token, oldest_first, media_mode, inline_limit_bytes
        )

        async def attempt() -> Window:
            assembler = WindowAssembler()
            call = self.stub.ReadWindow(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            )
            async for message in call:
                assembler.feed(message)
            return assembler.window()

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def iter_windows(
        self, session_id: str, *, oldest_first: bool = True, page_size: int = 0, **options: Any
    ) -> AsyncIterator[Window]:
        """Every page of a session, one at a time."""
        token = ""
        while True:
            window = await self.read_window(
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

    async def iter_window(
        self, session_id: str, *, oldest_first: bool = True, page_size: int = 0, **options: Any
    ) -> AsyncIterator[hpb.Entry]:
        """Every entry of a session, lazily, page by page."""
        async for window in self.iter_windows(
            session_id, oldest_first=oldest_first, page_size=page_size, **options
        ):
            for entry in window.entries:
                yield entry

    async def bootstrap(
        self, session_id: str = "", *, chat_key: str = "", page_size: int = 0
    ) -> Window:
        """Pending messages and the watch position (`.header`), then the latest window."""
        request = hpb.BootstrapRequest(
            session_id=session_id,
            chat_key=chat_key,
            page_size=page_size,
            max_batch_bytes=WINDOW_BATCH_BYTES,
        )

        async def attempt() -> Window:
            assembler = WindowAssembler()
            call = self.stub.Bootstrap(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            )
            async for message in call:
                assembler.feed(message)
            return assembler.window()

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def accept_message(
        self,
        text: str,
        *,
        session_id: str | None = None,
        chat_key: str | None = None,
        attachments: Iterable[Any] = (),
        txn_id: str | None = None,
    ) -> hpb.AcceptMessageResponse:
        """Record a message; retried with the same client_txn_id."""
        request = accept_request(
            txn_id or new_txn_id(), text, attachments, session_id=session_id, chat_key=chat_key
        )

        async def attempt() -> hpb.AcceptMessageResponse:
            return await self.stub.AcceptMessage(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            )

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def bind_chat_key(self, chat_key: str, session_id: str) -> int:
        """Bind a chat key to its session id (idempotent)."""
        request = hpb.BindChatKeyRequest(chat_key=chat_key, session_id=session_id)

        async def attempt() -> hpb.BindChatKeyResponse:
            return await self.stub.BindChatKey(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            )

        return int((await retry_async(attempt, self.retry, self._rng, self.addr)).bound_messages)

    async def watch(
        self,
        session_id: str = "",
        position: str = "",
        *,
        chat_key: str = "",
        heartbeats: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """Live events from `position`, resuming itself after drops; see HistoryClient.watch."""
        assembler = WatchAssembler(position)
        failures = 0
        while True:
            request = hpb.WatchSessionRequest(
                session_id=session_id, chat_key=chat_key, position=assembler.position
            )
            call = self.stub.WatchSession(request, metadata=self.metadata)
            try:
                async for message in call:
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
                if (
                    rpc_code(error) not in WATCH_RESUME_CODES
                    or failures >= self.watch_retry.max_attempts
                ):
                    raise from_rpc_error(error, addr=self.addr) from None
                await asyncio.sleep(self.watch_retry.delay(failures - 1, self._rng))
            finally:
                call.cancel()


class AsyncMediaStream:
    """The asyncio twin of client.media.MediaStream. An open ReadMedia call: `metadata`, then `chunks()` (or `read()`); `cancel()` ends it early.

    The call's messages arrive unparsed: a data chunk is a view into the
    message it came in, so passing it on copies nothing.
    """

    def __init__(self, metadata: mpb.MediaMetadata, call: Any) -> None:
        self.metadata = metadata
        self._call = call

    async def read(self) -> memoryview | None:
        """The next chunk, a view into its message (no copy); None at the end of the stream."""
        while True:
            try:
                message = await self._call.read()
            except grpc.RpcError as error:
                raise from_rpc_error(error) from None
            if message is _EOF:
                return None
            chunk = data_view(message)
            if chunk is not None:
                return chunk

    async def chunks(self) -> AsyncIterator[bytes]:
        """The bytes as the service sends them; the call is cancelled if left early."""
        try:
            while (chunk := await self.read()) is not None:
                yield bytes(chunk)
        finally:
            self._call.cancel()

    def cancel(self) -> None:
        """End the call without reading its bytes."""
        self._call.cancel()


# ReadMediaResponse{data} on the wire: this tag (field 2, length-delimited), a varint length, the bytes.
_DATA_TAG = mpb.ReadMediaResponse.DESCRIPTOR.fields_by_name["data"].number << 3 | 2
# What a grpc.aio stream's read() gives at its end (not in the type stubs).
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
_READ_MEDIA = "/{}/ReadMedia".format(mpb.DESCRIPTOR.services_by_name["MediaService"].full_name)


def data_view(message: bytes) -> memoryview | None:
    """The data chunk of a serialized ReadMediaResponse, a view into it; None for metadata.

    A message that is exactly the data field is sliced; any other is parsed
    (DataLoss when it does not parse).
    """
    if message[:1] == bytes((_DATA_TAG,)):
        length = shift = 0
        at = 1
        while at < len(message) and shift < 64:
            byte = message[at]
            at += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                if at + length == len(message):
                    return memoryview(message)[at:]
                break
            shift += 7
    try:
        parsed = mpb.ReadMediaResponse.FromString(message)
    except DecodeError:
        raise DataLoss("a media stream message did not parse") from None
    return memoryview(parsed.data) if parsed.WhichOneof("item") == "data" else None


class AsyncMediaClient(AsyncChannelClient):
    """The asyncio twin of client.media.MediaClient."""

    def __init__(
        self,
        addr: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        deadlines: Deadlines = DEFAULT_DEADLINES,
        retry: RetryPolicy = DEFAULT_RETRY,
        cache: MediaCache | None = None,
        interceptors: Sequence[Any] = (),
        metadata: Sequence[tuple[str, str]] = (),
        token: str | None = None,
        rng: random.Random | None = None,
        tls: TlsOptions | bool | None = None,
    ) -> None:
        super().__init__(media_addr(addr), channel, interceptors, metadata, token, rng, tls)
        self.stub = media_pb2_grpc.MediaServiceStub(self._channel)
        self.deadlines = deadlines
        self.retry = retry
        self.cache = cache if cache is not None else MediaCache()

    async def read_media(
        self, target: MediaTarget, pin: str | None = None, *, size: int | None = None
    ) -> Media:
        """All bytes of one medium, verified; an interrupted stream resumes at its offset.

        `size` (96, 320 or 960: the longest side in pixels) asks for a WebP
        thumbnail instead of the original; ValueError for any other size.
        """
        selector = selector_of(target, pin)
        thumbnail = thumbnail_size_of(size)
        progress = ReadProgress()

        async def attempt() -> Media:
            request = mpb.ReadMediaRequest(
                media=selector, read_offset=progress.received, size=thumbnail
            )
            call = self.stub.ReadMedia(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            )
            async for message in call:
                progress.feed(message)
            return progress.finish()

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def open_media(
        self,
        target: MediaTarget,
        pin: str | None = None,
        *,
        read_offset: int = 0,
        read_limit: int = 0,
        size: int | None = None,
        chunk_size: int = 0,
    ) -> AsyncMediaStream:
        """A ReadMedia stream whose metadata has arrived; its bytes are read chunk by chunk.

        For a caller that passes the bytes on as they come (the HTTP gateway):
        nothing is buffered beyond one chunk, nothing is retried or verified
        (the caller streams a part, or sends bytes before the end is known).
        A failure before the metadata raises the typed error here. `chunk_size`
        asks for larger chunks than the server's own (ReadMediaRequest.chunk_size).
        """
        request = mpb.ReadMediaRequest(
            media=selector_of(target, pin),
            read_offset=read_offset,
            read_limit=read_limit,
            size=thumbnail_size_of(size),
            chunk_size=chunk_size,
        )
        # Unparsed responses: the chunks are sliced out of the messages, not copied.
        read_media = self._channel.unary_stream(
            _READ_MEDIA,
            request_serializer=mpb.ReadMediaRequest.SerializeToString,
            response_deserializer=None,
        )
        call = read_media(request, timeout=self.deadlines.stream, metadata=self.metadata)
        try:
            first = await call.read()
        except grpc.RpcError as error:
            call.cancel()
            raise from_rpc_error(error) from None
        metadata = None
        if isinstance(first, bytes):
            try:
                parsed = mpb.ReadMediaResponse.FromString(first)
            except DecodeError:
                parsed = mpb.ReadMediaResponse()
            if parsed.WhichOneof("item") == "metadata":
                metadata = parsed.metadata
        if metadata is None:
            call.cancel()
            raise DataLoss("the media stream carried no metadata")
        return AsyncMediaStream(metadata, call)

    async def stat_media(
        self, targets: Iterable[MediaTarget], *, size: int | None = None
    ) -> list[mpb.StatMediaResult]:
        """Metadata of many media in one call; see MediaClient.stat_media (`size` too)."""
        request = mpb.StatMediaRequest(
            media=[selector_of(t) for t in targets], size=thumbnail_size_of(size)
        )

        async def attempt() -> mpb.StatMediaResponse:
            return await self.stub.StatMedia(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            )

        return list((await retry_async(attempt, self.retry, self._rng, self.addr)).results)

    async def fetch(
        self, target: MediaTarget, pin: str | None = None, *, size: int | None = None
    ) -> Media:
        """One medium through the cache; see MediaClient.fetch.

        With `size`, the thumbnail at that size (cached under its own key).
        """
        selector = selector_of(target, pin)
        thumbnail_size_of(size)  # ValueError before any call
        key = fetch_key_of(selector, size)
        cached = self.cache.lookup(key)
        if cached is not None:
            return cached
        # StatMedia names the original's sha256: it spares a read of the original only.
        if (
            size is None
            and selector.WhichOneof("ref") == "media_ref"
            and self.cache.sha256_for(key) is None
        ):
            (result,) = await self.stat_media([selector])
            error = stat_error(result)
            if error is not None:
                raise error
            self.cache.remember(key, result.metadata.sha256)
            cached = self.cache.get(result.metadata.sha256)
            if cached is not None:
                return cached
        media = await self.read_media(selector, size=size)
        self.cache.put(key, media)
        return media

    async def find_missing_blobs(self, sha256s: Iterable[str]) -> list[str]:
        """The digests the blob store does not have."""
        request = mpb.FindMissingBlobsRequest(sha256=list(sha256s))

        async def attempt() -> mpb.FindMissingBlobsResponse:
            return await self.stub.FindMissingBlobs(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            )

        return list((await retry_async(attempt, self.retry, self._rng, self.addr)).missing_sha256)

    async def write_blob(self, upload: Upload) -> mpb.WriteBlobResponse:
        """Upload one blob (content-addressed, so retrying it is safe)."""

        async def attempt() -> mpb.WriteBlobResponse:
            return await self.stub.WriteBlob(
                iter(upload.requests()), timeout=self.deadlines.stream, metadata=self.metadata
            )

        return await retry_async(attempt, self.retry, self._rng, self.addr)

    async def upload(self, images: Iterable[ImageSource | Upload]) -> list[Upload]:
        """Upload attachments the store lacks (FindMissingBlobs first); return them all."""
        uploads = [
            image if isinstance(image, Upload) else prepare_upload(image, number)
            for number, image in enumerate(images)
        ]
        if not uploads:
            return []
        missing = set(await self.find_missing_blobs(dict.fromkeys(u.sha256 for u in uploads)))
        for upload in uploads:
            if upload.sha256 in missing:
                await self.write_blob(upload)
                missing.discard(upload.sha256)
        return uploads


class AsyncClient(AsyncClosing):
    """The asyncio twin of client.client.Client."""

    def __init__(
        self, history_addr: str | None = None, media_addr: str | None = None, **options: Any
    ) -> None:
        cache = options.pop("cache", None)
        self.history = AsyncHistoryClient(history_addr, **options)
        self.media = AsyncMediaClient(media_addr, cache=cache, **options)

    async def close(self) -> None:
        """Close both channels."""
        await self.history.close()
        await self.media.close()

    async def send(
        self,
        session_id: str | None,
        text: str,
        images: Iterable[ImageSource] = (),
        *,
        chat_key: str | None = None,
        txn_id: str | None = None,
    ) -> hpb.AcceptedMessage:
        """Upload the images the store lacks, then AcceptMessage with one txn id."""
        uploads = await self.media.upload(images)
        response = await self.history.accept_message(
            text,
            session_id=session_id,
            chat_key=chat_key,
            attachments=uploads,
            txn_id=txn_id or new_txn_id(),
        )
        return response.message
