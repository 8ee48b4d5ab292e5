"""U+0000 in media requests, one answer on both state backends (docs/contract.md §9).

A U+0000 in a declared media type, a sha256 list or a blob ref is
INVALID_ARGUMENT with reason INVALID_ARGUMENT on SQLite and PostgreSQL alike,
and stores nothing; an odd but NUL-free media type is kept exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.media.v1 import media_pb2
from tests.support.backends import state_backend
from tests.support.media import StartMedia, png_bytes, read_media
from tests.support.reasons import assert_reason


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Media config overrides selecting the state backend."""
    yield from state_backend(request.param)


async def _upload(data: bytes, media_type: str) -> AsyncIterator[media_pb2.WriteBlobRequest]:
    header = media_pb2.WriteBlobHeader(
        sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), media_type=media_type
    )
    yield media_pb2.WriteBlobRequest(header=header)
    yield media_pb2.WriteBlobRequest(data=data)


async def test_a_nul_in_a_media_request_is_invalid_argument_on_both_backends(
    backend: dict[str, Any], start_media: StartMedia
) -> None:
    env = await start_media(**backend)
    data = png_bytes(2_000)
    sha = hashlib.sha256(data).hexdigest()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await env.stub.WriteBlob(_upload(data, "image/png\0"))
    assert assert_reason(raised.value, Reason.INVALID_ARGUMENT)
    for call in (
        lambda: env.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=[sha, "\0"])),
        lambda: env.stub.StatMedia(
            media_pb2.StatMediaRequest(media=[media_pb2.MediaSelector(blob_ref=f"media:\0{sha}")])
        ),
        lambda: read_media(env.stub, media_pb2.MediaSelector(blob_ref=f"media:{sha}\0")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call()
        assert assert_reason(raised.value, Reason.INVALID_ARGUMENT)
    missing = await env.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=[sha]))
    assert list(missing.missing_sha256) == [sha], "the refused upload stored nothing"
    # Without the NUL, an odd declared media type is kept exactly.
    odd = 'image/png; name="o\'brien \\ %_" \U0001f642'
    written = await env.stub.WriteBlob(_upload(data, odd))
    metadata, body, _ = await read_media(env.stub, media_pb2.MediaSelector(blob_ref=written.ref))
    assert body == data and metadata.declared_media_type == odd
