"""`scrollback.media.v1.MediaService`: proto <-> domain translation only.

Every domain error reaches the client through ERROR_TABLE, the one table mapping
exceptions to status codes (docs/contract.md §9), applied to every RPC, in its
streaming phase too, by `scrollback.server.grpc_support.maps_errors`. Blocking
work runs in threads.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from media_service.blobs import MediaInfo
from media_service.config import (
    DEFAULT_DECODED_CACHE_BYTES,
    DEFAULT_THUMBNAIL_MEMORY_BYTES,
    DEFAULT_THUMBNAIL_THREADS,
    DEFAULT_WRITE_DEADLINE_SECONDS,
    DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS,
)
from media_service.decoded import (
    DecodedCache,
    DecodedImage,
    Encoded,
)
from media_service.errors import (
    BlobMismatchError,
    BlobTooLargeError,
    CorruptMediaError,
    InvalidRequestError,
    LineTooLargeError,
    MediaNotFoundError,
    NotAnImageError,
    PinMismatchError,
    ReadRangeError,
    SearchCancelledError,
    StorageFullError,
    ThumbnailTooLargeError,
)
from media_service.library import (
    MediaLibrary,
    OpenMedia,
    Selector,
    ThumbnailJob,
    TranscriptSelector,
)
from media_service.media_wire import media_responses
from media_service.ranges import byte_range
from media_service.thumbnail_encodes import ThumbnailEncodes
from scrollback.contract.reasons import STATUS_OF, Reason
from scrollback.contract.refs import RefError, TranscriptImageRef, parse_blob_ref
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.principals import Principal
from scrollback.server.caller import current_principal
from scrollback.server.grpc_support import (
    ErrorTable,
    add_servicer_sending_serialized,
    error_message,
    maps_errors,
    reason_for,
)
from scrollback.server.lane import Lane
from scrollback.state.errors import StoreBusyError
from scrollback.transcripts import AmbiguousSessionError

Context = grpc.aio.ServicerContext[Any, Any]
MAX_STAT_SELECTORS = 1000
# A sized StatMedia may make a thumbnail per selector (a decode and an encode
# each): far fewer per call than plain stats, which only read headers.
MAX_SIZED_STAT_SELECTORS = 100

DEFAULT_SEARCH_THREADS = 2

# ThumbnailSize <-> the longest side in pixels (the domain's sizes).
THUMBNAIL_PIXELS: dict[media_pb2.ThumbnailSize.ValueType, int] = {
    media_pb2.THUMBNAIL_SIZE_96: 96,
    media_pb2.THUMBNAIL_SIZE_320: 320,
    media_pb2.THUMBNAIL_SIZE_960: 960,
}
THUMBNAIL_ENUMS: dict[int, media_pb2.ThumbnailSize.ValueType] = {
    pixels: size for size, pixels in THUMBNAIL_PIXELS.items()
}


class UploadIdleError(Exception):
    """A WriteBlob client stopped sending for longer than the idle timeout."""


class UploadDeadlineError(Exception):
    """A WriteBlob upload took longer than the overall upload deadline."""


ERROR_TABLE: ErrorTable = {
    RefError: Reason.REF_INVALID,
    InvalidRequestError: Reason.INVALID_ARGUMENT,
    BlobMismatchError: Reason.BLOB_MISMATCH,
    MediaNotFoundError: Reason.MEDIA_NOT_FOUND,
    PinMismatchError: Reason.PIN_MISMATCH,
    AmbiguousSessionError: Reason.SESSION_AMBIGUOUS,
    ReadRangeError: Reason.RANGE_NOT_SATISFIABLE,
    LineTooLargeError: Reason.LINE_TOO_LARGE,
    ThumbnailTooLargeError: Reason.IMAGE_TOO_LARGE,
    NotAnImageError: Reason.NOT_AN_IMAGE,
    BlobTooLargeError: Reason.BLOB_TOO_LARGE,
    StorageFullError: Reason.STORAGE_FULL,
    CorruptMediaError: Reason.MEDIA_CORRUPT,
    StoreBusyError: Reason.STORE_BUSY,
    UploadIdleError: Reason.UPLOAD_IDLE,
    UploadDeadlineError: Reason.UPLOAD_DEADLINE,
    SearchCancelledError: Reason.LOOKUP_CANCELLED,
}


def selector_from_proto(selector: media_pb2.MediaSelector) -> Selector:
    """The domain selector of a MediaSelector; RefError / InvalidRequestError."""
    which = selector.WhichOneof("ref")
    if which == "media_ref":
        ref = selector.media_ref
        # The hint has presence: unset is no hint at all (straight to the cache or
        # the search), never a guess at offset 0.
        return TranscriptSelector(
            TranscriptImageRef(ref.session_id, ref.entry_uuid, ref.index),
            ref.pin,
            ref.line_offset_hint if ref.HasField("line_offset_hint") else None,
        )
    if which == "blob_ref":
        return parse_blob_ref(selector.blob_ref)
    raise InvalidRequestError("a media selector needs media_ref or blob_ref")


def metadata_to_proto(info: MediaInfo) -> media_pb2.MediaMetadata:
    """MediaInfo -> MediaMetadata."""
    return media_pb2.MediaMetadata(
        content_type=info.content_type,
        declared_media_type=info.declared_media_type,
        size_bytes=info.size_bytes,
        sha256=info.sha256,
        safe_inline=info.safe_inline,
        pin=info.pin,
        width=info.width,
        height=info.height,
        thumbnail_size=THUMBNAIL_ENUMS.get(
            info.thumbnail_size, media_pb2.THUMBNAIL_SIZE_UNSPECIFIED
        ),
        source_sha256=info.source_sha256,
        still_of_animation=info.still_of_animation,
    )


def thumbnail_pixels(size: media_pb2.ThumbnailSize.ValueType) -> int | None:
    """The longest side of a requested ThumbnailSize; None for the original."""
    if size == media_pb2.THUMBNAIL_SIZE_UNSPECIFIED:
        return None
    pixels = THUMBNAIL_PIXELS.get(size)
    if pixels is None:
        raise InvalidRequestError("size must be one of the ThumbnailSize values")
    return pixels


def error_to_proto(error: Exception) -> media_pb2.MediaError:
    """A per-item error, through the same table; unknown errors say nothing more."""
    reason = reason_for(error, ERROR_TABLE)
    message = "internal error" if reason is None else error_message(error, reason)
    reason = reason or Reason.INTERNAL
    return media_pb2.MediaError(code=STATUS_OF[reason], message=message, reason=reason)


def _stat_response(results: list[MediaInfo | Exception | None]) -> media_pb2.StatMediaResponse:
    """One StatMediaResult per result: its metadata, or its error."""
    return media_pb2.StatMediaResponse(
        results=[
            media_pb2.StatMediaResult(metadata=metadata_to_proto(result))
            if isinstance(result, MediaInfo)
            else media_pb2.StatMediaResult(error=error_to_proto(result or Exception()))
            for result in results
        ]
    )


@maps_errors(ERROR_TABLE)
class MediaServicer(media_pb2_grpc.MediaServiceServicer):
    """The MediaService RPCs over a MediaLibrary."""

    def __init__(
        self,
        library: MediaLibrary,
        *,
        chunk_size: int,
        write_idle_timeout: float = DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS,
        write_deadline: float = DEFAULT_WRITE_DEADLINE_SECONDS,
        search_threads: int = DEFAULT_SEARCH_THREADS,
        thumbnail_threads: int = DEFAULT_THUMBNAIL_THREADS,
        thumbnail_memory_bytes: int = DEFAULT_THUMBNAIL_MEMORY_BYTES,
        decoded_cache_bytes: int = DEFAULT_DECODED_CACHE_BYTES,
    ) -> None:
        self._library = library
        # StatMedia's transcript searches run here, apart from the default pool
        # that serves ReadMedia, so a flood of searches cannot starve reads.
        self._search_pool = ThreadPoolExecutor(search_threads, thread_name_prefix="media-search")
        # Thumbnail encodes (CPU-bound): bounded in threads and memory, fair between
        # callers, shared per (original, size).
        self.thumbnail_encodes = ThumbnailEncodes(thumbnail_threads, thumbnail_memory_bytes)
        self._chunk_size = chunk_size
        # Decoded transcript images, ready to send (media_service.decoded); 0 bytes: off.
        self.decoded = DecodedCache(decoded_cache_bytes)
        self._idle_timeout = write_idle_timeout
        self._write_deadline = write_deadline
        # ReadMedia's open-and-verify runs on a lane of its own (scrollback.server.lane):
        # concurrent reads then do not take the GIL from each other at every syscall.
        self._open_lane = Lane(name="media-open-lane")

    async def _next(
        self, iterator: AsyncIterator[media_pb2.WriteBlobRequest], deadline: float
    ) -> media_pb2.WriteBlobRequest | None:
        """The next upload message, None at the end.

        UploadIdleError after the idle timeout; UploadDeadlineError once the
        monotonic `deadline` of the whole upload passes (a client dripping a
        byte just inside the idle timeout is still bounded).
        """
        remaining = deadline - time.monotonic()
        try:
            return await asyncio.wait_for(
                anext(iterator, None), max(0.0, min(self._idle_timeout, remaining))
            )
        except TimeoutError:
            if remaining <= self._idle_timeout:
                raise UploadDeadlineError(
                    f"the upload took over {self._write_deadline:g} s (write_deadline_seconds)"
                ) from None
            raise UploadIdleError(
                f"no upload data for {self._idle_timeout:g} s (write_idle_timeout_seconds)"
            ) from None

    async def ReadMedia(  # type: ignore[override]  # Encoded: a pre-serialized ReadMediaResponse
        self, request: media_pb2.ReadMediaRequest, context: Context
    ) -> AsyncIterator[media_pb2.ReadMediaResponse | Encoded]:
        """Metadata first, then the bytes of [read_offset, read_offset + read_limit)."""
        if not request.HasField("media"):
            raise InvalidRequestError("media is required")
        selector = selector_from_proto(request.media)
        if request.read_offset < 0 or request.read_limit < 0:
            byte_range(0, request.read_offset, request.read_limit)  # raises ReadRangeError
        pixels = thumbnail_pixels(request.size)
        decoded: weakref.ref[DecodedImage] | None = None
        if pixels is None:
            media, decoded = await self._open_lane.run(
                functools.partial(self._open_read, current_principal(), selector)
            )
        else:
            media = await self._thumbnail(selector, pixels)
        responses = media_responses(
            media,
            media_pb2.ReadMediaResponse(metadata=metadata_to_proto(media.info)),
            (request.read_offset, request.read_limit),
            self._chunk_size,
            decoded,
            self.decoded,
        )
        try:
            async for response in responses:
                yield response
        finally:
            await responses.aclose()  # closes the medium now, not when collected

    def _open_read(
        self, principal: Principal | None, selector: Selector
    ) -> tuple[OpenMedia, weakref.ref[DecodedImage] | None]:
        """The medium opened and verified, and its decoded image if cached (blocking).

        The decoded cache is consulted only once `open` has verified the line
        as it stands now.
        """
        media = self._library.open(principal, selector)
        key = media.decoded_key
        if key is None or not self.decoded.holds(media.info.size_bytes):
            return media, None
        return media, self.decoded.get(key)

    async def _thumbnail(
        self, selector: Selector, pixels: int, checks: ThreadPoolExecutor | None = None
    ) -> OpenMedia:
        """The thumbnail: checks and the cache on `checks` (default: the read threads),
        an encode on the thumbnail pool."""
        loop = asyncio.get_running_loop()
        principal = current_principal()
        found = await loop.run_in_executor(
            checks, functools.partial(self._library.thumbnail, principal, selector, pixels)
        )
        if not isinstance(found, ThumbnailJob):
            return found
        return await self.thumbnail_encodes.run(found, principal)

    async def StatMedia(
        self, request: media_pb2.StatMediaRequest, context: Context
    ) -> media_pb2.StatMediaResponse:
        """Metadata of each selector, or its own error, in the order asked."""
        if len(request.media) > MAX_STAT_SELECTORS:
            raise InvalidRequestError(f"at most {MAX_STAT_SELECTORS} selectors per call")
        pixels = thumbnail_pixels(request.size)
        if pixels is not None and len(request.media) > MAX_SIZED_STAT_SELECTORS:
            raise InvalidRequestError(
                f"at most {MAX_SIZED_STAT_SELECTORS} selectors per call with a size"
            )
        results: list[MediaInfo | Exception | None] = [None] * len(request.media)
        parsed: list[Selector] = []
        numbers: list[int] = []
        for number, proto in enumerate(request.media):
            try:
                parsed.append(selector_from_proto(proto))
                numbers.append(number)
            except Exception as error:
                results[number] = error
        if pixels is not None:
            found = await self._stat_thumbnails(parsed, pixels)
            for number, result in zip(numbers, found, strict=True):
                results[number] = result
            return _stat_response(results)
        # The work stops between slices once the client leaves or its deadline passes,
        # and runs on the search pool, never on the threads that serve reads.
        stop = threading.Event()
        remaining = context.time_remaining()
        ends = time.monotonic() + remaining if remaining is not None else float("inf")

        def should_stop() -> bool:
            return stop.is_set() or time.monotonic() > ends

        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(
                self._search_pool,
                self._library.stat_many,
                current_principal(),
                parsed,
                should_stop,
            )
        finally:
            stop.set()
        for number, result in zip(numbers, found, strict=True):
            results[number] = result
        return _stat_response(results)

    async def _stat_thumbnails(
        self, selectors: list[Selector], pixels: int
    ) -> list[MediaInfo | Exception]:
        """The metadata of each selector's thumbnail at `pixels`, or its own error.

        Each goes the way of a thumbnail ReadMedia (so the errors are the same),
        its checks on the search pool and its encode, if it is not cached, on the
        thumbnail pool: neither occupies the threads that serve reads. A caller
        that leaves cancels the encodes not yet started. A selector asked for
        twice in one call is made once (they would all miss the cache at once).
        """

        async def one(selector: Selector) -> MediaInfo | Exception:
            try:
                media = await self._thumbnail(selector, pixels, self._search_pool)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                return error
            media.close()
            return media.info

        distinct = list(dict.fromkeys(selectors))
        found = await asyncio.gather(*(one(selector) for selector in distinct))
        by_selector = dict(zip(distinct, found, strict=True))
        return [by_selector[selector] for selector in selectors]

    async def WriteBlob(
        self,
        request_iterator: AsyncIterator[media_pb2.WriteBlobRequest],
        context: Context,
    ) -> media_pb2.WriteBlobResponse:
        """Header first, then data; answered once the blob is durable."""
        blobs = self._library.blobs
        iterator = aiter(request_iterator)
        deadline = time.monotonic() + self._write_deadline
        first = await self._next(iterator, deadline)
        if first is None or first.WhichOneof("item") != "header":
            raise InvalidRequestError("the first message must be the header")
        header = first.header
        upload = await asyncio.to_thread(
            blobs.begin_upload,
            current_principal(),
            header.sha256,
            header.size_bytes,
            header.media_type,
        )
        try:
            while (message := await self._next(iterator, deadline)) is not None:
                if message.WhichOneof("item") == "header":
                    raise InvalidRequestError("the header must be sent only first")
                if message.data:
                    await asyncio.to_thread(upload.write, message.data)
            written = await asyncio.to_thread(upload.finish)
        except BaseException:
            # Failed, cut off or cancelled: the partial upload is discarded.
            upload.abort()
            raise
        return media_pb2.WriteBlobResponse(
            ref=written.ref, size_bytes=written.size_bytes, already_existed=written.already_existed
        )

    async def FindMissingBlobs(
        self, request: media_pb2.FindMissingBlobsRequest, context: Context
    ) -> media_pb2.FindMissingBlobsResponse:
        """The digests the store lacks or the caller may not read, in the order asked."""
        missing = await asyncio.to_thread(
            self._library.find_missing, current_principal(), list(request.sha256)
        )
        return media_pb2.FindMissingBlobsResponse(missing_sha256=missing)


def add_media_servicer(servicer: MediaServicer, server: grpc.aio.Server) -> None:
    """Register the servicer as the generated code does, ReadMedia sending `Encoded` as is.

    The wire format is unchanged: an `Encoded` is the serialized ReadMediaResponse,
    made once when its image was cached.
    """
    add_servicer_sending_serialized(
        media_pb2_grpc.add_MediaServiceServicer_to_server,
        servicer,
        server,
        media_pb2.DESCRIPTOR.services_by_name["MediaService"].full_name,
        ("ReadMedia",),
    )
