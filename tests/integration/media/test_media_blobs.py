"""The blob store over gRPC: WriteBlob, FindMissingBlobs, ReadMedia/StatMedia of media:<sha256>."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from media_service.servicer import MediaServicer
from scrollback.contract.reasons import Reason
from scrollback.media.v1 import media_pb2
from tests.support.media import MediaEnv, StartMedia, png_bytes, read_error, read_media
from tests.support.reasons import assert_reason


def upload_messages(
    data: bytes,
    *,
    sha256: str | None = None,
    size: int | None = None,
    media_type: str = "image/png",
    chunk: int = 100_000,
) -> Iterator[media_pb2.WriteBlobRequest]:
    header = media_pb2.WriteBlobHeader(
        sha256=hashlib.sha256(data).hexdigest() if sha256 is None else sha256,
        size_bytes=len(data) if size is None else size,
        media_type=media_type,
    )
    yield media_pb2.WriteBlobRequest(header=header)
    for at in range(0, len(data), chunk):
        yield media_pb2.WriteBlobRequest(data=data[at : at + chunk])


def blob_path(env: MediaEnv, sha256: str) -> Path:
    return env.state / "blobs" / sha256[:2] / sha256[2:4] / sha256


def leftovers(env: MediaEnv) -> list[str]:
    """Every file under blobs/ except quarantine."""
    found = []
    for folder, _, files in os.walk(env.state / "blobs"):
        if "quarantine" not in folder:
            found.extend(files)
    return found


def patch_file(path: Path, offset: int, data: bytes, truncate: int | None = None) -> None:
    """Damage a file on disk (synchronous helper for the async tests)."""
    with open(path, "r+b") as handle:
        if truncate is not None:
            handle.truncate(truncate)
        else:
            handle.seek(offset)
            handle.write(data)


def rows(env: MediaEnv) -> int:
    with sqlite3.connect(env.state / "scrollback.db") as connection:
        return int(connection.execute("SELECT COUNT(*) FROM blob").fetchone()[0])


async def write_error(
    env: MediaEnv, messages: Iterator[media_pb2.WriteBlobRequest]
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await env.stub.WriteBlob(messages)
    return caught.value


async def test_write_find_read_stat_roundtrip(media: MediaEnv) -> None:
    data = png_bytes(300_000, 1)
    sha = hashlib.sha256(data).hexdigest()
    missing = await media.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=[sha]))
    assert list(missing.missing_sha256) == [sha]
    response = await media.stub.WriteBlob(upload_messages(data))
    assert response.ref == f"media:{sha}" and response.size_bytes == len(data)
    assert not response.already_existed
    assert blob_path(media, sha).read_bytes() == data
    other = "f" * 64
    missing = await media.stub.FindMissingBlobs(
        media_pb2.FindMissingBlobsRequest(sha256=[other, sha, other])
    )
    assert list(missing.missing_sha256) == [other, other]
    selector = media_pb2.MediaSelector(blob_ref=response.ref)
    metadata, read, chunks = await read_media(media.stub, selector)
    assert read == data and max(chunks) <= 64 * 1024
    assert metadata.sha256 == sha and metadata.size_bytes == len(data)
    assert metadata.content_type == "image/png" and metadata.safe_inline
    assert metadata.declared_media_type == "image/png" and metadata.pin == ""
    _, part, _ = await read_media(media.stub, selector, len(data) - 1, 0)
    assert part == data[-1:]
    _, part, _ = await read_media(media.stub, selector, len(data), 0)
    assert part == b""
    for offset, limit in [(len(data) + 1, 0), (-1, 0), (0, -5)]:
        error = await read_error(media.stub, selector, offset, limit)
        assert error.code() == grpc.StatusCode.OUT_OF_RANGE
    stat = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=[selector]))
    assert stat.results[0].metadata.sha256 == sha
    again = await media.stub.WriteBlob(upload_messages(data, chunk=7_000))
    assert again.already_existed


async def test_concurrent_identical_uploads(media: MediaEnv) -> None:
    data = png_bytes(500_000, 2)
    sha = hashlib.sha256(data).hexdigest()

    async def upload_and_read() -> bytes:
        response = await media.stub.WriteBlob(upload_messages(data, chunk=50_000))
        assert response.ref == f"media:{sha}"
        _, read, _ = await read_media(media.stub, media_pb2.MediaSelector(blob_ref=response.ref))
        return read

    results = await asyncio.gather(*(upload_and_read() for _ in range(8)))
    assert all(r == data for r in results)
    assert leftovers(media) == [sha]
    assert rows(media) == 1


async def test_mismatches_leave_nothing_behind(media: MediaEnv, tmp_path: Path) -> None:
    data = png_bytes(200_000, 3)
    cases = [
        upload_messages(data, sha256="0" * 64),  # wrong digest
        upload_messages(data, size=len(data) + 1),  # fewer bytes than declared
        upload_messages(data, size=len(data) - 1),  # more bytes than declared
        upload_messages(data, sha256="A" * 64),  # malformed digest
        upload_messages(data, media_type="x" * 256),
        iter([media_pb2.WriteBlobRequest(data=data)]),  # no header
        iter([]),  # nothing at all
        iter(
            [*upload_messages(data), media_pb2.WriteBlobRequest(header=media_pb2.WriteBlobHeader())]
        ),
    ]
    reasons = [Reason.BLOB_MISMATCH] * 3 + [Reason.REF_INVALID] + [Reason.INVALID_ARGUMENT] * 4
    for messages, reason in zip(cases, reasons, strict=True):
        error = await write_error(media, messages)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert_reason(error, reason)
        assert str(tmp_path) not in (error.details() or "")
        assert leftovers(media) == []
        assert rows(media) == 0


async def test_size_limit_is_resource_exhausted(start_media: StartMedia) -> None:
    env = await start_media(max_blob_size=100_000)
    data = png_bytes(150_000, 4)
    error = await write_error(env, upload_messages(data))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert leftovers(env) == [] and rows(env) == 0
    ok = png_bytes(100_000, 5)
    response = await env.stub.WriteBlob(upload_messages(ok))
    assert response.size_bytes == 100_000


async def test_corrupt_blob_is_data_loss_and_quarantined(media: MediaEnv, tmp_path: Path) -> None:
    data = png_bytes(200_000, 6)
    sha = hashlib.sha256(data).hexdigest()
    response = await media.stub.WriteBlob(upload_messages(data))
    path = blob_path(media, sha)
    patch_file(path, 150_000, b"\x00\x01\x02")
    selector = media_pb2.MediaSelector(blob_ref=response.ref)
    call = media.stub.ReadMedia(media_pb2.ReadMediaRequest(media=selector))
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in call:
            received.append(message)
    assert caught.value.code() == grpc.StatusCode.DATA_LOSS
    assert received == []  # not even the metadata: nothing of a corrupt blob is served
    assert str(tmp_path) not in (caught.value.details() or "")
    assert not path.exists()
    quarantined = list((media.state / "blobs" / "quarantine").iterdir())
    assert len(quarantined) == 1 and quarantined[0].name.startswith(sha)
    missing = await media.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=[sha]))
    assert list(missing.missing_sha256) == [sha]
    # uploading the right bytes again heals it
    await media.stub.WriteBlob(upload_messages(data))
    _, read, _ = await read_media(media.stub, selector)
    assert read == data


async def test_truncated_blob_is_data_loss_on_stat(media: MediaEnv) -> None:
    data = png_bytes(50_000, 7)
    sha = hashlib.sha256(data).hexdigest()
    await media.stub.WriteBlob(upload_messages(data))
    patch_file(blob_path(media, sha), 0, b"", truncate=10)
    stat = await media.stub.StatMedia(
        media_pb2.StatMediaRequest(media=[media_pb2.MediaSelector(blob_ref=f"media:{sha}")])
    )
    assert stat.results[0].error.code == "DATA_LOSS"


async def test_unknown_blob_and_bad_find_missing(media: MediaEnv) -> None:
    error = await read_error(media.stub, media_pb2.MediaSelector(blob_ref="media:" + "e" * 64))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    for bad, reason in (
        (["../x"], Reason.REF_INVALID),
        (["E" * 64], Reason.REF_INVALID),
        (["a" * 63], Reason.REF_INVALID),
        (["0" * 64] * 10_001, Reason.INVALID_ARGUMENT),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await media.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=bad))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert_reason(caught.value, reason)
    many = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(1_500)]
    missing = await media.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=many))
    assert list(missing.missing_sha256) == many


async def test_svg_blob_is_octet_stream(media: MediaEnv) -> None:
    svg = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"></svg>'
    response = await media.stub.WriteBlob(upload_messages(svg, media_type="image/png"))
    metadata, data, _ = await read_media(media.stub, media_pb2.MediaSelector(blob_ref=response.ref))
    assert data == svg
    assert metadata.content_type == "application/octet-stream" and not metadata.safe_inline


async def test_empty_blob(media: MediaEnv) -> None:
    response = await media.stub.WriteBlob(upload_messages(b""))
    metadata, data, chunks = await read_media(
        media.stub, media_pb2.MediaSelector(blob_ref=response.ref)
    )
    assert data == b"" and chunks == [] and metadata.size_bytes == 0


async def test_stale_temps_removed_at_startup(start_media: StartMedia, tmp_path: Path) -> None:
    temp_dir = tmp_path / "state" / "blobs" / "tmp"
    temp_dir.mkdir(parents=True)
    (temp_dir / "dead.part").write_bytes(b"half an upload")
    await start_media()
    assert list(temp_dir.iterdir()) == []


async def test_health_and_reflection(media: MediaEnv) -> None:
    health = health_pb2_grpc.HealthStub(media.channel)
    answer = await health.Check(
        health_pb2.HealthCheckRequest(service="scrollback.media.v1.MediaService")
    )
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(media.channel)
    names: list[str] = []
    async for reply in reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    ):
        names.extend(s.name for s in reply.list_services_response.service)
    assert "scrollback.media.v1.MediaService" in names


async def test_uploads_and_missing_blobs_are_the_instances_calls(media: MediaEnv) -> None:
    # The servicer maps WriteBlob and FindMissingBlobs to MediaInstance calls, as
    # every RPC: called directly (no RPC), they store and answer what the RPCs do.
    assert isinstance(media.server.servicer, MediaServicer)
    instance = media.server.servicer.instance
    data = png_bytes(250_000, seed=21)
    digest = hashlib.sha256(data).hexdigest()

    async def chunks(failing: bool) -> AsyncIterator[bytes]:
        yield data[:100_000]
        if failing:
            raise ConnectionError("the caller left")
        yield data[100_000:]

    with pytest.raises(ConnectionError):
        await instance.write_blob(None, digest, len(data), "image/png", chunks(failing=True))
    assert await instance.find_missing(None, [digest]) == [digest]  # the partial one discarded
    written = await instance.write_blob(None, digest, len(data), "image/png", chunks(failing=False))
    assert written.ref == f"media:{digest}" and not written.already_existed
    assert await instance.find_missing(None, [digest]) == []
    _, read, _ = await read_media(media.stub, media_pb2.MediaSelector(blob_ref=written.ref))
    assert read == data
