"""Errors raised after ReadMedia's first message reach the client as their mapped status.

The error table applies to the streaming phase too (docs/contract.md §9): a
transcript rewritten or truncated while its image is being sent ends the stream
with DATA_LOSS, never UNKNOWN, with the decoded cache on or off: a first read
misses the cache and is served from the file as without it (the chunks it
sent are cached only once the whole image hashed to its metadata).
tests/integration/media/test_media_decoded_cache.py covers reads that hit it.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import grpc
import pytest

from scrollback.media.v1 import media_pb2
from tests.support.media import (
    StartMedia,
    dumps,
    entry,
    image_block,
    mint,
    png_bytes,
    write_transcript,
)

IMAGE_SIZE = 4 * 1024 * 1024  # many read blocks: the stream is far from done after its metadata


def rewrite(path: Path, payload: bytes, how: str) -> None:
    """Change the transcript under the open stream: the payload replaced in place, or cut."""
    content = path.read_bytes()
    encoded = base64.b64encode(payload)
    at = content.index(encoded)
    if how == "replaced":
        other = base64.b64encode(png_bytes(len(payload), seed=9))
        assert len(other) == len(encoded) and other != encoded
        with path.open("r+b") as handle:
            os.pwrite(handle.fileno(), other, at)
    else:
        os.truncate(path, at + len(encoded) // 4)


@pytest.mark.parametrize("cache_bytes", [0, 64 * 1024 * 1024])
@pytest.mark.parametrize("how", ["replaced", "truncated"])
async def test_transcript_changed_mid_stream_is_data_loss(
    start_media: StartMedia, how: str, cache_bytes: int
) -> None:
    media = await start_media(decoded_cache_bytes=cache_bytes)
    payload = png_bytes(IMAGE_SIZE, seed=3)
    line = dumps(entry("u-mid", [image_block(payload)]))
    path = write_transcript(media.root, "mid", [line])
    (ref,) = mint("mid", line)
    call = media.stub.ReadMedia(
        media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(media_ref=ref))
    )
    stream = aiter(call)
    first = await anext(stream)
    assert first.WhichOneof("item") == "metadata"
    assert first.metadata.size_bytes == IMAGE_SIZE
    rewrite(path, payload, how)
    received = 0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in stream:
            received += len(message.data)
    assert received < IMAGE_SIZE
    assert caught.value.code() == grpc.StatusCode.DATA_LOSS
    assert str(media.root) not in (caught.value.details() or "")
    servicer = media.server.servicer
    assert servicer is not None and servicer.instance.decoded.total_bytes == 0  # nothing cached
