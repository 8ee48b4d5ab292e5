"""AcceptMessage, BindChatKey and Bootstrap: durability, idempotency, blobs, the kill test."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.state.sqlite import connect
from tests.support.history import HarnessFactory, HistoryHarness, collect, expect_error, line
from tests.support.security import ServerProcess


def _add_blob(state: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    connection = connect(state)
    try:
        connection.execute(
            "INSERT INTO blob (sha256, size_bytes, media_type, created_at) VALUES (?, ?, ?, ?)",
            (sha, len(data), "image/png", time.time()),
        )
    finally:
        connection.close()
    return f"media:{sha}"


async def test_accept_is_idempotent_and_checks_blobs(history: HistoryHarness) -> None:
    stub, tmp = history.stub, history.tmp
    await expect_error(
        stub.AcceptMessage(pb.AcceptMessageRequest(client_txn_id="t0", session_id="s1", text="x")),
        grpc.StatusCode.NOT_FOUND,
        tmp,
    )  # no such session: a typo must not look like success
    history.transcript("s1").write_bytes(line(type="user", uuid="u0", message={"content": "hi"}))
    request = pb.AcceptMessageRequest(client_txn_id="t1", session_id="s1", text="hello")
    first = await stub.AcceptMessage(request)
    again = await stub.AcceptMessage(request)
    assert not first.replayed and again.replayed
    assert again.message == first.message and first.message.seq > 0
    await expect_error(
        stub.AcceptMessage(
            pb.AcceptMessageRequest(client_txn_id="t1", session_id="s1", text="other")
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        tmp,
    )
    missing = "media:" + "0" * 64
    await expect_error(
        stub.AcceptMessage(
            pb.AcceptMessageRequest(
                client_txn_id="t2", session_id="s1", attachments=[pb.Attachment(ref=missing)]
            )
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        tmp,
    )
    for bad in (
        pb.AcceptMessageRequest(client_txn_id="t3", text="no target"),
        pb.AcceptMessageRequest(client_txn_id="bad id", session_id="s1"),
        pb.AcceptMessageRequest(
            client_txn_id="t3", session_id="s1", attachments=[pb.Attachment(ref="x")]
        ),
    ):
        await expect_error(stub.AcceptMessage(bad), grpc.StatusCode.INVALID_ARGUMENT, tmp)
    await expect_error(
        stub.AcceptMessage(
            pb.AcceptMessageRequest(
                client_txn_id="t4", session_id="s1", text="x" * (1024 * 1024 + 1)
            )
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        tmp,
    )
    ref = _add_blob(history.state, b"png bytes")
    ok = await stub.AcceptMessage(
        pb.AcceptMessageRequest(
            client_txn_id="t5",
            session_id="s1",
            text="with photo",
            attachments=[pb.Attachment(ref=ref, name="a.png", media_type="image/png")],
        )
    )
    assert ok.message.attachments[0].ref == ref
    connection = connect(history.state)
    rows = connection.execute(
        "SELECT r.sha256, m.public_seq FROM blob_ref r"
        " JOIN accepted_message m ON m.seq = r.message_seq"
    ).fetchall()
    connection.close()
    assert rows == [(ref.removeprefix("media:"), ok.message.seq)]


async def test_chat_key_binding_and_bootstrap(history: HistoryHarness) -> None:
    stub = history.stub
    await stub.AcceptMessage(
        pb.AcceptMessageRequest(client_txn_id="k1", chat_key="chat1", text="hi")
    )
    headers, page = await collect(stub.Bootstrap(pb.BootstrapRequest(chat_key="chat1")))
    assert [m.text for m in headers[0].pending] == ["hi"] and headers[0].session_id == ""
    bound = await stub.BindChatKey(pb.BindChatKeyRequest(chat_key="chat1", session_id="sess1"))
    assert bound.bound_messages == 1
    again = await stub.BindChatKey(pb.BindChatKeyRequest(chat_key="chat1", session_id="sess1"))
    assert again.bound_messages == 0
    await expect_error(
        stub.BindChatKey(pb.BindChatKeyRequest(chat_key="chat1", session_id="other")),
        grpc.StatusCode.FAILED_PRECONDITION,
        history.tmp,
    )
    history.transcript("sess1").write_bytes(line(type="user", uuid="u1", message={"content": "hi"}))
    headers, page = await collect(stub.Bootstrap(pb.BootstrapRequest(session_id="sess1")))
    assert [m.text for m in headers[0].pending] == ["hi"] and headers[0].session_id == "sess1"
    assert [e.uuid for e in page.entries] == ["u1"] and headers[0].watch_position
    await expect_error(
        stub.Bootstrap(pb.BootstrapRequest(session_id="unknown")),
        grpc.StatusCode.NOT_FOUND,
        history.tmp,
    )


async def test_pending_messages_age_out_and_release_blobs(history_server: HarnessFactory) -> None:
    async with history_server(pending_keep=2, pending_ttl_seconds=0.5) as history:
        for session in ("s1", "s2"):
            history.transcript(session).write_bytes(line(type="user", uuid="u0"))
        ref = _add_blob(history.state, b"bytes")
        for n in range(4):
            await history.stub.AcceptMessage(
                pb.AcceptMessageRequest(
                    client_txn_id=f"t{n}",
                    session_id="s1",
                    text=f"m{n}",
                    attachments=[pb.Attachment(ref=ref)],
                )
            )
        await collect(history.stub.Bootstrap(pb.BootstrapRequest(chat_key="none")))
        connection = connect(history.state)
        refs = connection.execute(
            "SELECT message_seq FROM blob_ref ORDER BY message_seq"
        ).fetchall()
        assert len(refs) == 2
        await asyncio.sleep(0.6)  # the pending messages outlive their 0.5 s TTL: under test
        await history.stub.AcceptMessage(
            pb.AcceptMessageRequest(client_txn_id="t9", session_id="s2")
        )
        assert connection.execute("SELECT COUNT(*) FROM blob_ref").fetchone()[0] == 0
        retired = connection.execute(
            "SELECT COUNT(*) FROM accepted_message WHERE retired_at IS NOT NULL"
        ).fetchone()[0]
        connection.close()
        assert retired == 4


@pytest.mark.slow
async def test_accepted_message_survives_sigkill(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "s1.jsonl").write_bytes(line(type="user", uuid="u1"))
    server = ServerProcess("history_service", root, state)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 20)
            stub = history_pb2_grpc.HistoryServiceStub(channel)
            answer = await stub.AcceptMessage(
                pb.AcceptMessageRequest(client_txn_id="kill1", session_id="s1", text="durable")
            )
    finally:
        server.kill()
    server = ServerProcess("history_service", root, state)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 20)
            stub = history_pb2_grpc.HistoryServiceStub(channel)
            headers, _ = await collect(stub.Bootstrap(pb.BootstrapRequest(session_id="s1")))
            assert [m.client_txn_id for m in headers[0].pending] == ["kill1"]
            assert headers[0].pending[0] == answer.message
            replay = await stub.AcceptMessage(
                pb.AcceptMessageRequest(client_txn_id="kill1", session_id="s1", text="durable")
            )
            assert replay.replayed and replay.message == answer.message
    finally:
        assert server.terminate() == 0
