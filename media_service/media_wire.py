"""One opened medium as ReadMedia's stream: its metadata, then its bytes in chunks.

`media_responses` is what the servicer's ReadMedia yields. Bytes already in
memory are sliced; a decoded transcript image cached as serialized chunks
(`media_service.decoded`) goes out as those chunks, taken one at a time through
a weak reference, so an entry evicted mid-stream is freed and the rest is read
from the file; a whole read that missed the cache fills it as it goes. Other
reads go block by block from the file. The wire format is the generated one;
only the copying is saved.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator

from media_service.decoded import DecodedCache, DecodedImage, Encoded, Filler
from media_service.errors import CorruptMediaError
from media_service.library import OpenMedia
from media_service.ranges import byte_range
from scrollback.media.v1 import media_pb2

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
) -> AsyncGenerator[media_pb2.ReadMediaResponse | Encoded, None]:
    """`first` (the metadata), then the bytes of [read_offset, read_offset + read_limit).

    `read` is the request's (read_offset, read_limit), checked here
    (ReadRangeError); `decoded` the cached chunks the open found, if any. The
    medium is closed when the stream ends, however it ends.
    """
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
                await asyncio.to_thread(media.read, at, min(READ_BLOCK, position - at))
        elif (
            media.decoded_key is not None
            and start == 0
            and end == media.info.size_bytes
            and READ_BLOCK % chunk == 0
        ):
            # A miss sent whole: the chunks are kept as they go, cached at the end.
            filler = cache.begin_fill(media.decoded_key, end, chunk)
        while position < end:
            block = await asyncio.to_thread(media.read, position, min(READ_BLOCK, end - position))
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
        if filler is not None:
            filler.finish()  # every byte read in order: the last read checked the sha256
    finally:
        if filler is not None:
            filler.abandon()  # nothing cached unless finished
        media.close()
