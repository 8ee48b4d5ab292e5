"""The media service's wire side: protos to domain values and back, and ReadMedia's stream.

`selector_from_proto`, `thumbnail_pixels`, `metadata_to_proto`, `stat_response`
and `error_to_proto` translate; `upload_from_stream` turns WriteBlob's stream
into its header and its data, read within its idle timeout and overall
deadline (`next_upload_message`). `media_responses` is what the servicer's ReadMedia yields. Bytes already in
memory are sliced; a decoded transcript image cached as serialized chunks
(`media_service.decoded`) goes out as those chunks, taken one at a time through
a weak reference, so an entry evicted mid-stream is freed and the rest is read
from the file; a whole read that missed the cache fills it as it goes. Other
reads go block by block from the file. A request that asks for larger chunks
(ReadMediaRequest.chunk_size) gets whole multiples of the server's chunk joined
into one message (`_grouped`), whichever way they were read. The wire format
is the generated one; only the copying is saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from media_service.blobs import MediaInfo
from media_service.decoded import DecodedCache, DecodedImage, Encoded, Filler
from media_service.errors import (
    ERROR_TABLE,
    CorruptMediaError,
    InvalidRequestError,
    UploadDeadlineError,
    UploadIdleError,
)
from media_service.library import OpenMedia, Selector, TranscriptSelector
from media_service.ranges import byte_range
from scrollback.contract.reasons import STATUS_OF, Reason
from scrollback.contract.refs import TranscriptImageRef, parse_blob_ref
from scrollback.media.v1 import media_pb2
from scrollback.server.grpc_support import error_message, reason_for

# ThumbnailSize <-> the longest side in pixels (the domain's sizes).
THUMBNAIL_PIXELS: dict[media_pb2.ThumbnailSize.ValueType, int] = {
    media_pb2.THUMBNAIL_SIZE_96: 96,
    media_pb2.THUMBNAIL_SIZE_320: 320,
    media_pb2.THUMBNAIL_SIZE_960: 960,
}
THUMBNAIL_ENUMS: dict[int, media_pb2.ThumbnailSize.ValueType] = {
    pixels: size for size, pixels in THUMBNAIL_PIXELS.items()
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


def thumbnail_pixels(size: media_pb2.ThumbnailSize.ValueType) -> int | None:
    """The longest side of a requested ThumbnailSize; None for the original."""
    if size == media_pb2.THUMBNAIL_SIZE_UNSPECIFIED:
        return None
    pixels = THUMBNAIL_PIXELS.get(size)
    if pixels is None:
        raise InvalidRequestError("size must be one of the ThumbnailSize values")
    return pixels


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


def error_to_proto(error: BaseException) -> media_pb2.MediaError:
    """A per-item error, through the service's table; unknown errors say nothing more."""
    reason = reason_for(error, ERROR_TABLE)
    message = "internal error" if reason is None else error_message(error, reason)
    reason = reason or Reason.INTERNAL
    return media_pb2.MediaError(code=STATUS_OF[reason], message=message, reason=reason)


def stat_response(results: list[MediaInfo | BaseException]) -> media_pb2.StatMediaResponse:
    """One StatMediaResult per result: its metadata, or its error."""
    return media_pb2.StatMediaResponse(
        results=[
            media_pb2.StatMediaResult(metadata=metadata_to_proto(result))
            if isinstance(result, MediaInfo)
            else media_pb2.StatMediaResult(error=error_to_proto(result))
            for result in results
        ]
    )


async def next_upload_message(
    messages: AsyncIterator[media_pb2.WriteBlobRequest],
    deadline: float,
    idle_timeout: float,
    total_seconds: float,
) -> media_pb2.WriteBlobRequest | None:
    """The next WriteBlob message, None at the end.

    UploadIdleError after `idle_timeout` seconds of silence; UploadDeadlineError
    once the monotonic `deadline` of the whole upload (`total_seconds` after it
    began) passes, so a client dripping a byte just inside the idle timeout is
    still bounded.
    """
    remaining = deadline - time.monotonic()
    try:
        return await asyncio.wait_for(anext(messages, None), max(0.0, min(idle_timeout, remaining)))
    except TimeoutError:
        if remaining <= idle_timeout:
            raise UploadDeadlineError(
                f"the upload took over {total_seconds:g} s (write_deadline_seconds)"
            ) from None
        raise UploadIdleError(
            f"no upload data for {idle_timeout:g} s (write_idle_timeout_seconds)"
        ) from None


@dataclass(frozen=True, slots=True)
class UploadHeader:
    """What WriteBlob's first message declares."""

    sha256: str
    size_bytes: int
    media_type: str


async def upload_from_stream(
    messages: AsyncIterator[media_pb2.WriteBlobRequest], idle_timeout: float, total_seconds: float
) -> tuple[UploadHeader, AsyncIterator[bytes]]:
    """WriteBlob's header, and its data chunks as they come (empty ones skipped).

    InvalidRequestError when the first message is no header, or (from the
    chunks) when a header comes again; the timeouts of `next_upload_message`
    bound the whole stream from this call on.
    """
    deadline = time.monotonic() + total_seconds
    first = await next_upload_message(messages, deadline, idle_timeout, total_seconds)
    if first is None or first.WhichOneof("item") != "header":
        raise InvalidRequestError("the first message must be the header")
    header = UploadHeader(first.header.sha256, first.header.size_bytes, first.header.media_type)

    async def chunks() -> AsyncIterator[bytes]:
        while (
            message := await next_upload_message(messages, deadline, idle_timeout, total_seconds)
        ) is not None:
            if message.WhichOneof("item") == "header":
                raise InvalidRequestError("the header must be sent only first")
            if message.data:
                yield message.data

    return header, chunks()


# Bytes are read from disk (or decoded from a transcript) in blocks of this
# size, then sent in chunks: a stream holds at most one block.
READ_BLOCK = 256 * 1024


async def media_responses(
    media: OpenMedia,
    first: media_pb2.ReadMediaResponse,
    read: tuple[int, int],
    chunk: int,
    decoded: weakref.ref[DecodedImage] | None,
    cache: DecodedCache,
    group: int = 1,
) -> AsyncGenerator[media_pb2.ReadMediaResponse | Encoded, None]:
    """`first` (the metadata), then the bytes of [read_offset, read_offset + read_limit).

    `read` is the request's (read_offset, read_limit), checked here
    (ReadRangeError); `decoded` the cached chunks the open found, if any.
    `chunk` is the server's chunk size (the decoded cache's); `group` chunks
    go out as one message (a caller that asked for larger chunks). The medium
    is closed when the stream ends, however it ends.
    """
    if group > 1:
        responses = _grouped(media_responses(media, first, read, chunk, decoded, cache), group)
        try:
            async for response in responses:
                yield response
        finally:
            await responses.aclose()
        return
    filler: Filler | None = None
    try:
        start, end = byte_range(media.info.size_bytes, *read)
        yield first
        if media.data is not None:
            # In memory already: each chunk is copied once, no thread hop.
            view = memoryview(media.data)
            for at in range(start, end, chunk):
                yield media_pb2.ReadMediaResponse(data=bytes(view[at : min(at + chunk, end)]))
            return
        position = start
        if decoded is not None:
            # Taken one chunk at a time through the weak reference: an entry
            # evicted meanwhile is freed, and the rest comes from the file.
            while position < end:
                image = decoded()
                if image is None:
                    break
                index, within = divmod(position, chunk)
                piece = image.chunks[index]
                del image
                length = len(piece.data) - within
                if within == 0 and position + length <= end:
                    yield piece  # already serialized: grpc sends it as it is
                else:
                    length = min(length, end - position)
                    yield media_pb2.ReadMediaResponse(
                        data=bytes(piece.data[within : within + length])
                    )
                del piece
                position += length
            if position >= end:
                return
            # Evicted mid-stream: the file's bytes from here, hashed from 0 again
            # so that a transcript changed since still ends in DATA_LOSS.
            media.restart_reads()
            for at in range(0, position, READ_BLOCK):
                await _read(media, at, min(READ_BLOCK, position - at))
        elif (
            media.decoded_key is not None
            and start == 0
            and end == media.info.size_bytes
            and READ_BLOCK % chunk == 0
        ):
            # A miss sent whole: the chunks are kept as they go, cached at the end.
            filler = cache.begin_fill(media.decoded_key, end, chunk)
        async with contextlib.aclosing(_from_file(media, position, end, chunk, filler)) as rest:
            async for response in rest:
                yield response
        if filler is not None:
            filler.finish()  # every byte read in order: the last read checked the sha256
    finally:
        if filler is not None:
            filler.abandon()  # nothing cached unless finished
        media.close()


async def _from_file(
    media: OpenMedia, position: int, end: int, chunk: int, filler: Filler | None
) -> AsyncGenerator[media_pb2.ReadMediaResponse | Encoded, None]:
    """The bytes of [position, end) read block by block, as chunks (kept by `filler`, if any)."""
    while position < end:
        block = await _read(media, position, min(READ_BLOCK, end - position))
        if not block:
            raise CorruptMediaError()
        if filler is None:
            for at in range(0, len(block), chunk):
                yield media_pb2.ReadMediaResponse(data=block[at : at + chunk])
        else:
            view = memoryview(block)
            for at in range(0, len(block), chunk):
                piece = Encoded(view[at : at + chunk])
                filler.add(piece)
                yield piece
                del piece
            view.release()
        position += len(block)
        del block


async def _read(media: OpenMedia, offset: int, length: int) -> bytes:
    """One blocking read of the medium, in a thread of the executor its reads run on."""
    if media.read_executor is None:
        return await asyncio.to_thread(media.read, offset, length)
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()  # as asyncio.to_thread passes it
    return await loop.run_in_executor(media.read_executor, context.run, media.read, offset, length)


async def _grouped(
    responses: AsyncGenerator[media_pb2.ReadMediaResponse | Encoded, None], group: int
) -> AsyncGenerator[media_pb2.ReadMediaResponse | Encoded, None]:
    """The metadata, then every `group` consecutive data chunks as one message.

    Holds at most `group` chunks (one message's bytes), copied once into it.
    """
    parts: list[bytes | memoryview] = []
    try:
        async for response in responses:
            if isinstance(response, Encoded) or response.WhichOneof("item") == "data":
                parts.append(response.data)
            else:
                yield response
                continue
            if len(parts) == group:
                message = Encoded(*parts)
                parts.clear()
                yield message
        if parts:
            yield Encoded(*parts)
    finally:
        await responses.aclose()
