"""Metrics over HTTP, one log line per RPC, flow control, the upload idle timeout, graceful shutdown."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from tests.support.security import (
    TOKENS,
    ServerProcess,
    auth,
    image_line,
    media_ref,
    png,
    read_blob,
    status_of,
    text_line,
    upload,
    write_transcript,
)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_metrics_are_scraped_over_http_and_logs_carry_no_secrets(
    secured_pair_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scrollback.rpc")
    async with secured_pair_factory(metrics_addr="127.0.0.1:0") as pair:
        port = pair.history.metrics_port
        assert port and pair.media.metrics_port
        line = image_line("u1", png(60_000, 3))
        path = write_transcript(pair.root, "proj-a", "sess-m", [text_line("u0", "hi"), line])
        history, media = pair.history_stub(), pair.media_stub()
        before = _scrape(port)
        await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        async for _ in history.ReadWindow(
            hpb.ReadWindowRequest(session_id="sess-m"), metadata=auth("alice")
        ):
            pass
        assert (
            await status_of(
                history.ReadWindow(
                    hpb.ReadWindowRequest(session_id="x" * 65), metadata=auth("alice")
                )
            )
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        ref = media_ref("sess-m", line)
        data = await read_blob(media, mpb.MediaSelector(media_ref=ref), auth("alice"))
        # a rewritten transcript: the old pin no longer matches
        path.write_bytes(text_line("u0", "hi") + b"\n" + image_line("u1", png(60_000, 4)) + b"\n")
        assert (
            await status_of(
                media.ReadMedia(
                    mpb.ReadMediaRequest(media=mpb.MediaSelector(media_ref=ref)),
                    metadata=auth("alice"),
                )
            )
            == grpc.StatusCode.FAILED_PRECONDITION
        )
        # a corrupt blob
        blob = png(20_000, 5)
        digest = hashlib.sha256(blob).hexdigest()
        await upload(media, blob, auth("alice"))
        stored = pair.state / "blobs" / digest[:2] / digest[2:4] / digest
        stored.write_bytes(b"\x00" * len(blob))
        assert (
            await status_of(
                media.ReadMedia(
                    mpb.ReadMediaRequest(media=mpb.MediaSelector(blob_ref="media:" + digest)),
                    metadata=auth("alice"),
                )
            )
            == grpc.StatusCode.DATA_LOSS
        )
        after = _scrape(port)

        def delta(name: str, **labels: str) -> float:
            return _value(after, name, **labels) - _value(before, name, **labels)

        assert (
            delta(
                "scrollback_rpc_requests_total", service="history", method="ListSessions", code="OK"
            )
            == 1
        )
        assert (
            delta(
                "scrollback_rpc_requests_total", service="history", method="ReadWindow", code="OK"
            )
            == 1
        )
        assert (
            delta(
                "scrollback_rpc_requests_total",
                service="history",
                method="ReadWindow",
                code="INVALID_ARGUMENT",
            )
            == 1
        )
        assert (
            delta(
                "scrollback_rpc_requests_total",
                service="media",
                method="ReadMedia",
                code="DATA_LOSS",
            )
            == 1
        )
        assert (
            delta("scrollback_rpc_latency_seconds_count", service="history", method="ListSessions")
            == 1
        )
        assert delta("scrollback_read_media_bytes_sent_total") == len(data)
        assert delta("scrollback_payloads_stripped_total") >= 1
        assert delta("scrollback_pin_mismatches_total") == 1
        assert delta("scrollback_blob_verify_failures_total") == 1
    rpc_lines = [r.getMessage() for r in caplog.records if r.name == "scrollback.rpc"]
    assert any("method=ListSessions code=OK" in m and "principal=alice" in m for m in rpc_lines)
    assert any("method=ReadWindow code=INVALID_ARGUMENT" in m for m in rpc_lines)
    for message in rpc_lines:
        assert re.fullmatch(
            r"rpc service=\w+ method=\w+ code=\w+ duration_ms=[\d.]+ principal=[\w-]+", message
        )
    everything = "\n".join(r.getMessage() for r in caplog.records)
    assert all(token not in everything for token in TOKENS.values())


async def test_a_slow_reader_does_not_make_the_server_read_ahead(secured_pair_factory: Any) -> None:
    async with secured_pair_factory(metrics_addr="127.0.0.1:0") as pair:
        media = pair.media_stub()
        size = 48 * 1024 * 1024
        data = os.urandom(size)
        written = await upload(media, data, auth("alice"), chunk=2 * 1024 * 1024)
        before = _value(_scrape(pair.media.metrics_port), "scrollback_read_media_bytes_sent_total")
        call = media.ReadMedia(
            mpb.ReadMediaRequest(media=mpb.MediaSelector(blob_ref=written.ref)),
            metadata=auth("alice"),
        )
        await call.read()
        await call.read()
        await asyncio.sleep(1.0)  # the client stops reading on purpose: what is sent meanwhile
        sent = (
            _value(_scrape(pair.media.metrics_port), "scrollback_read_media_bytes_sent_total")
            - before
        )
        # bounded by flow-control windows and one read block, far below the blob's size
        assert sent < 16 * 1024 * 1024, sent
        received = 0
        while (message := await call.read()) is not grpc.aio.EOF:
            received += len(message.data)
        assert received + 64 * 1024 >= size  # the first chunk was read above


async def test_a_silent_upload_is_cut_off_and_leaves_nothing(secured_pair_factory: Any) -> None:
    async with secured_pair_factory(media_overrides={"write_idle_timeout_seconds": 0.5}) as pair:
        media = pair.media_stub()
        data = png(200_000, 8)

        async def stalled() -> Any:
            yield mpb.WriteBlobRequest(
                header=mpb.WriteBlobHeader(
                    sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)
                )
            )
            yield mpb.WriteBlobRequest(data=data[:1000])
            await asyncio.sleep(30)  # a client gone silent on purpose: under test

        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await media.WriteBlob(stalled(), metadata=auth("alice"), timeout=10)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "write_idle_timeout_seconds" in (raised.value.details() or "")
        assert list((pair.state / "blobs" / "tmp").iterdir()) == []


async def test_a_dripping_upload_is_ended_at_the_deadline_and_leaves_nothing(
    secured_pair_factory: Any,
) -> None:
    # Each byte arrives well inside the idle timeout: only the overall deadline ends it.
    overrides = {"write_idle_timeout_seconds": 1.0, "write_deadline_seconds": 1.5}
    async with secured_pair_factory(media_overrides=overrides) as pair:
        media = pair.media_stub()
        data = png(200_000, 9)
        digest = hashlib.sha256(data).hexdigest()

        async def dripping() -> Any:
            yield mpb.WriteBlobRequest(
                header=mpb.WriteBlobHeader(sha256=digest, size_bytes=len(data))
            )
            for at in range(len(data)):
                await asyncio.sleep(0.2)  # dripping on purpose: under test
                yield mpb.WriteBlobRequest(data=data[at : at + 1])

        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await media.WriteBlob(dripping(), metadata=auth("alice"), timeout=20)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "write_deadline_seconds" in (raised.value.details() or "")
        assert list((pair.state / "blobs" / "tmp").iterdir()) == []
        missing = await media.FindMissingBlobs(
            mpb.FindMissingBlobsRequest(sha256=[digest]), metadata=auth("alice")
        )
        assert list(missing.missing_sha256) == [digest]


async def test_sigterm_lets_an_in_flight_stream_finish(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    state.mkdir()
    server = ServerProcess("media_service", root, state)
    try:
        size = 24 * 1024 * 1024
        data = os.urandom(size)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = media_pb2_grpc.MediaServiceStub(channel)
            written = await upload(stub, data)
            call = stub.ReadMedia(
                mpb.ReadMediaRequest(media=mpb.MediaSelector(blob_ref=written.ref))
            )
            first = await call.read()
            assert first.WhichOneof("item") == "metadata"
            server.process.terminate()  # SIGTERM while the stream is in flight
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 5
            while True:
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                except grpc.aio.AioRpcError:
                    break  # already refusing new calls: also fine
                if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
                assert time.monotonic() < deadline, "still SERVING after SIGTERM"
                await asyncio.sleep(0.02)
            chunks = []
            while (message := await call.read()) is not grpc.aio.EOF:
                chunks.append(message.data)
            assert b"".join(chunks) == data
            assert await call.code() == grpc.StatusCode.OK
        assert server.process.wait(20) == 0
    finally:
        server.kill()
