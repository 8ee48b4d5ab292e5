"""Faults: SIGKILL mid-upload and mid-accept, a full disk, a locked database, transcripts
truncated, rewritten or deleted under open streams."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from tests.support.security import (
    ServerProcess,
    blob_files,
    db_counts,
    image_line,
    png,
    text_line,
    upload,
    write_transcript,
)


async def _until(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    """Poll until the predicate holds or the timeout passes."""
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:  # noqa: ASYNC110 - polls files
        await asyncio.sleep(0.02)


async def _watching(watch: Any) -> None:
    """Return once the watch has sent its first message (a heartbeat within the pair's
    `heartbeat_seconds`): the server has taken its start position."""
    first = await watch.read()
    assert first.WhichOneof("event") in ("heartbeat", "entry", "accepted")


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    return root, state


async def test_sigkill_during_an_upload_leaves_nothing_half_visible(tmp_path: Path) -> None:
    root, state = _dirs(tmp_path)
    server = ServerProcess("media_service", root, state)
    done = png(100_000, 1)
    half = os.urandom(8 * 1024 * 1024)
    sent_half = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = media_pb2_grpc.MediaServiceStub(channel)
            acknowledged = await upload(stub, done)

            async def half_sent() -> Any:
                yield mpb.WriteBlobRequest(
                    header=mpb.WriteBlobHeader(
                        sha256=hashlib.sha256(half).hexdigest(), size_bytes=len(half)
                    )
                )
                yield mpb.WriteBlobRequest(data=half[: 2 * 1024 * 1024])
                yield mpb.WriteBlobRequest(data=half[2 * 1024 * 1024 : 4 * 1024 * 1024])
                sent_half.set()
                await asyncio.sleep(30)  # a client that never finishes: killed mid-upload

            call = stub.WriteBlob(half_sent())
            await asyncio.wait_for(sent_half.wait(), 10)
            await _until(lambda: bool(list((state / "blobs" / "tmp").iterdir())))
            server.kill()
            with pytest.raises(grpc.aio.AioRpcError):
                await call
        assert list((state / "blobs" / "tmp").iterdir()), "the upload was in progress"
        server = ServerProcess("media_service", root, state)
        assert list((state / "blobs" / "tmp").iterdir()) == []  # removed at start
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = media_pb2_grpc.MediaServiceStub(channel)
            missing = await stub.FindMissingBlobs(
                mpb.FindMissingBlobsRequest(
                    sha256=[hashlib.sha256(done).hexdigest(), hashlib.sha256(half).hexdigest()]
                )
            )
            assert list(missing.missing_sha256) == [hashlib.sha256(half).hexdigest()]
            chunks = [
                m.data
                async for m in stub.ReadMedia(
                    mpb.ReadMediaRequest(media=mpb.MediaSelector(blob_ref=acknowledged.ref))
                )
                if m.WhichOneof("item") == "data"
            ]
            assert b"".join(chunks) == done
        assert db_counts(state)["blob"] == 1
    finally:
        server.kill()


async def test_sigkill_during_accepts_loses_nothing_acknowledged(tmp_path: Path) -> None:
    root, state = _dirs(tmp_path)
    write_transcript(root, "proj", "sess-k", [text_line("u0", "hi")])
    server = ServerProcess("history_service", root, state)
    acknowledged: list[str] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = history_pb2_grpc.HistoryServiceStub(channel)

            async def worker(number: int) -> None:
                for i in range(10_000):
                    txn = f"w{number}-{i}"
                    try:
                        await stub.AcceptMessage(
                            hpb.AcceptMessageRequest(
                                client_txn_id=txn, session_id="sess-k", text=f"m {txn}"
                            )
                        )
                    except grpc.aio.AioRpcError:
                        return
                    acknowledged.append(txn)

            workers = [asyncio.create_task(worker(n)) for n in range(4)]
            await _until(lambda: len(acknowledged) >= 40, 20)
            server.kill()
            await asyncio.gather(*workers)
        server = ServerProcess("history_service", root, state)
        connection = sqlite3.connect(state / "scrollback.db")
        stored = {
            row[0] for row in connection.execute("SELECT client_txn_id FROM accepted_message")
        }
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        connection.close()
        assert set(acknowledged) <= stored
        assert len(stored) - len(acknowledged) <= 4  # at most one unanswered commit per worker
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = history_pb2_grpc.HistoryServiceStub(channel)
            replay = await stub.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id=acknowledged[0], session_id="sess-k", text=f"m {acknowledged[0]}"
                )
            )
            assert replay.replayed
    finally:
        server.kill()


async def test_a_full_disk_is_resource_exhausted_and_corrupts_nothing(tmp_path: Path) -> None:
    root, state = _dirs(tmp_path)
    limit = 3 * 1024 * 1024
    preexec = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))"
    )
    server = ServerProcess("media_service", root, state, preexec=preexec)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = media_pb2_grpc.MediaServiceStub(channel)
            small = await upload(stub, png(50_000, 2))
            counts, files = db_counts(state), blob_files(state)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await upload(stub, os.urandom(4 * 1024 * 1024))
            assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "/" not in (raised.value.details() or "")
            assert db_counts(state) == counts and blob_files(state) == files
            assert list((state / "blobs" / "tmp").iterdir()) == []
            again = await upload(stub, png(60_000, 3))
            assert not again.already_existed and small.ref != again.ref
    finally:
        server.kill()


async def test_a_locked_database_answers_unavailable_in_time_then_recovers(
    secured_pair_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCROLLBACK_STATE_BUSY_TIMEOUT_MS", "500")
    async with secured_pair_factory(auth=False) as pair:
        write_transcript(pair.root, "proj", "sess-l", [text_line("u0", "hi")])
        stub = pair.history_stub()
        media = pair.media_stub()
        locker = sqlite3.connect(pair.state / "scrollback.db", isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.AcceptMessage(
                    hpb.AcceptMessageRequest(
                        client_txn_id="locked-1", session_id="sess-l", text="x"
                    ),
                    timeout=10,
                )
            assert raised.value.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
            assert time.monotonic() - started < 5
            with pytest.raises(grpc.aio.AioRpcError) as blob_raised:
                await upload(media, png(10_000, 4))
            assert blob_raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert list((pair.state / "blobs" / "tmp").iterdir()) == []
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        reply = await stub.AcceptMessage(
            hpb.AcceptMessageRequest(client_txn_id="locked-1", session_id="sess-l", text="x")
        )
        assert not reply.replayed
        await upload(media, png(10_000, 4))


async def test_transcripts_truncated_rewritten_or_deleted_under_open_streams(
    secured_pair_factory: Any,
) -> None:
    async with secured_pair_factory(auth=False) as pair:
        lines = [text_line(f"u{i}", "x" * 2000) for i in range(300)] + [
            image_line("img", png(80_000, 5))
        ]
        path = write_transcript(pair.root, "proj", "sess-t", lines)
        stub = pair.history_stub()
        # a window stream: the file is truncated after the first message
        call = stub.ReadWindow(hpb.ReadWindowRequest(session_id="sess-t", page_size=200))
        first = await call.read()
        assert first.WhichOneof("item") == "entry"
        path.write_bytes(lines[0] + b"\n")
        rest = []
        try:
            while (message := await call.read()) is not grpc.aio.EOF:
                rest.append(message)
            # a clean end: every entry is whole JSON and the stream ends with WindowEnd
            assert rest[-1].WhichOneof("item") == "end"
            token = rest[-1].end.next_page_token
            for message in rest[:-1]:
                assert message.entry.json.startswith("{")
            if token:
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    async for _ in stub.ReadWindow(
                        hpb.ReadWindowRequest(session_id="sess-t", page_token=token)
                    ):
                        pass
                assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION

        # a watch: truncated (rewritten) under it
        path.write_bytes(b"".join(line + b"\n" for line in lines[:10]))
        watch = stub.WatchSession(hpb.WatchSessionRequest(session_id="sess-t"), timeout=10)
        await _watching(watch)
        path.write_bytes(lines[0] + b"\n")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            while (message := await watch.read()) is not grpc.aio.EOF:
                assert message.WhichOneof("event") in ("heartbeat", "entry", "accepted")
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION

        # a watch: the transcript deleted under it
        path.write_bytes(b"".join(line + b"\n" for line in lines[:10]))
        watch = stub.WatchSession(hpb.WatchSessionRequest(session_id="sess-t"), timeout=10)
        await _watching(watch)
        path.unlink()
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            while (message := await watch.read()) is not grpc.aio.EOF:
                assert message.WhichOneof("event") in ("heartbeat", "entry", "accepted")
        assert raised.value.code() in (
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.FAILED_PRECONDITION,
        )
