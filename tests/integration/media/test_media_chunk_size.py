"""ReadMediaRequest.chunk_size: a caller may ask for fewer, larger chunks, never for smaller ones.

Over a real server with 64 KiB chunks: an image read whole while it is not
cached (the cache fills as it goes), the same image from the decoded cache,
a range of it, and a blob; each with the bytes unchanged and the chunks as
large as asked, up to 256 KiB.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from media_service.config import MAX_CHUNK_SIZE
from scrollback.media.v1 import media_pb2
from tests.support.media import (
    MediaEnv,
    dumps,
    entry,
    image_block,
    mint,
    png_bytes,
    read_media,
    write_transcript,
)

KIB = 1024


def _sizes(total: int, chunk: int) -> list[int]:
    return [min(chunk, total - at) for at in range(0, total, chunk)]


async def test_larger_chunks_from_the_file_and_from_the_cache(media: MediaEnv) -> None:
    chunk = media.config.chunk_size
    payload = png_bytes(10 * chunk + 1234, seed=5)
    line = dumps(entry("u-big", [image_block(payload)]))
    write_transcript(media.root, "chunks", [line])
    (ref,) = mint("chunks", line)
    selector = media_pb2.MediaSelector(media_ref=ref)

    # Not cached yet: read from the file, the cache filled as it goes.
    _meta, data, sizes = await read_media(media.stub, selector, chunk_size=4 * chunk)
    assert data == payload
    assert sizes == _sizes(len(payload), 4 * chunk)
    # From the decoded cache, as larger chunks too; and the server's own without asking.
    _meta, data, sizes = await read_media(media.stub, selector, chunk_size=3 * chunk)
    assert data == payload and sizes == _sizes(len(payload), 3 * chunk)
    _meta, data, sizes = await read_media(media.stub, selector)
    assert data == payload and sizes == _sizes(len(payload), chunk)
    # A range, not aligned to any chunk.
    _meta, data, sizes = await read_media(
        media.stub, selector, read_offset=100, read_limit=6 * chunk, chunk_size=4 * chunk
    )
    assert data == payload[100 : 100 + 6 * chunk]
    assert max(sizes) <= 4 * chunk and len(sizes) < 6


async def test_never_smaller_than_the_servers_nor_over_256_kib(media: MediaEnv) -> None:
    chunk = media.config.chunk_size
    payload = png_bytes(MAX_CHUNK_SIZE * 3, seed=6)
    line = dumps(entry("u-cap", [image_block(payload)]))
    write_transcript(media.root, "cap", [line])
    (ref,) = mint("cap", line)
    selector = media_pb2.MediaSelector(media_ref=ref)
    for asked, expected in ((1000, chunk), (chunk + 1, chunk), (1 << 30, MAX_CHUNK_SIZE)):
        _meta, data, sizes = await read_media(media.stub, selector, chunk_size=asked)
        assert data == payload
        assert sizes == _sizes(len(payload), expected), asked


async def test_a_blob_in_larger_chunks(media: MediaEnv) -> None:
    chunk = media.config.chunk_size
    payload = png_bytes(5 * chunk + 7, seed=7)
    digest = hashlib.sha256(payload).hexdigest()

    async def upload() -> AsyncIterator[media_pb2.WriteBlobRequest]:
        yield media_pb2.WriteBlobRequest(
            header=media_pb2.WriteBlobHeader(sha256=digest, size_bytes=len(payload))
        )
        yield media_pb2.WriteBlobRequest(data=payload)

    written = await media.stub.WriteBlob(upload())
    selector = media_pb2.MediaSelector(blob_ref=written.ref)
    _meta, data, sizes = await read_media(media.stub, selector, chunk_size=2 * chunk)
    assert data == payload and sizes == _sizes(len(payload), 2 * chunk)
