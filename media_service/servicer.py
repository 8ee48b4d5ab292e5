"""`scrollback.media.v1.MediaService`: proto <-> domain translation only.

Each RPC is request -> MediaInstance call -> response; the
conversions and ReadMedia's stream are media_service.media_wire's. Every domain
error reaches the client through ERROR_TABLE (media_service.errors), the one
table mapping exceptions to reasons and status codes (docs/contract.md §9),
applied to every RPC, in its streaming phase too, by
`scrollback.server.grpc_support.maps_errors`. Blocking work runs in threads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from media_service.blobs import MediaInfo
from media_service.config import MAX_CHUNK_SIZE
from media_service.decoded import Encoded
from media_service.errors import ERROR_TABLE, InvalidRequestError
from media_service.instance import MediaInstance
from media_service.library import Selector
from media_service.media_wire import (
    media_responses,
    metadata_to_proto,
    selector_from_proto,
    stat_response,
    thumbnail_pixels,
    upload_from_stream,
)
from media_service.ranges import byte_range
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.server.caller import current_principal
from scrollback.server.grpc_support import add_servicer_sending_serialized, maps_errors

Context = grpc.aio.ServicerContext[Any, Any]
MAX_STAT_SELECTORS = 1000
# A sized StatMedia may make a thumbnail per selector (a decode and an encode
# each): far fewer per call than plain stats, which only read headers.
MAX_SIZED_STAT_SELECTORS = 100


@maps_errors(ERROR_TABLE)
class MediaServicer(media_pb2_grpc.MediaServiceServicer):
    """The MediaService RPCs over a MediaInstance."""

    def __init__(
        self,
        instance: MediaInstance,
        *,
        chunk_size: int,
        write_idle_timeout: float,
        write_deadline: float,
    ) -> None:
        self.instance = instance
        self._chunk_size = chunk_size
        self._idle_timeout = write_idle_timeout
        self._write_deadline = write_deadline

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
        media, decoded = await self.instance.open(current_principal(), selector, pixels)
        responses = media_responses(
            media,
            media_pb2.ReadMediaResponse(metadata=metadata_to_proto(media.info)),
            (request.read_offset, request.read_limit),
            self._chunk_size,
            decoded,
            self.instance.decoded,
            # Larger chunks asked for: whole multiples of the server's, within the cap.
            max(1, min(request.chunk_size, MAX_CHUNK_SIZE) // self._chunk_size),
        )
        try:
            async for response in responses:
                yield response
        finally:
            await responses.aclose()  # closes the medium now, not when collected

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
        parsed: list[Selector] = []
        numbers: list[int] = []
        errors: dict[int, Exception] = {}
        for number, proto in enumerate(request.media):
            try:
                parsed.append(selector_from_proto(proto))
                numbers.append(number)
            except Exception as error:
                errors[number] = error
        found = await self.instance.stat(
            current_principal(), parsed, pixels, context.time_remaining()
        )
        results: dict[int, MediaInfo | BaseException] = {
            **errors,
            **dict(zip(numbers, found, strict=True)),
        }
        return stat_response([results[number] for number in range(len(request.media))])

    async def WriteBlob(
        self,
        request_iterator: AsyncIterator[media_pb2.WriteBlobRequest],
        context: Context,
    ) -> media_pb2.WriteBlobResponse:
        """Header first, then data; answered once the blob is durable."""
        header, chunks = await upload_from_stream(
            aiter(request_iterator), self._idle_timeout, self._write_deadline
        )
        written = await self.instance.write_blob(
            current_principal(), header.sha256, header.size_bytes, header.media_type, chunks
        )
        return media_pb2.WriteBlobResponse(
            ref=written.ref, size_bytes=written.size_bytes, already_existed=written.already_existed
        )

    async def FindMissingBlobs(
        self, request: media_pb2.FindMissingBlobsRequest, context: Context
    ) -> media_pb2.FindMissingBlobsResponse:
        """The digests the store lacks or the caller may not read, in the order asked."""
        missing = await self.instance.find_missing(current_principal(), list(request.sha256))
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
