"""Tenants stay apart (issue 11 items 1 and 2), over real servers with a token file.

alice sees proj-a, bob proj-b, admin every project (security_helpers). Every
test runs on the embedded SQLite state and on PostgreSQL (a throwaway
database on SCROLLBACK_TEST_POSTGRES_URL; skipped when unreachable, failed
under CI=true):

- a known sha256 is not a key: attaching a blob one may not read answers
  exactly like attaching one that does not exist, reads stay NOT_FOUND,
  FindMissingBlobs says missing, and uploading the same bytes makes one an owner;
- chat keys live in their principal's namespace: Bootstrap, AcceptMessage,
  WatchSession and BindChatKey on another principal's key see and change
  nothing of hers, whichever binds first.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import psycopg
import pytest

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from tests.support.security import (
    auth,
    db_counts,
    png,
    read_blob,
    status_of,
    text_line,
    upload,
    write_transcript,
)

ADMIN_URL = os.environ.get(
    "SCROLLBACK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
NEVER = hashlib.sha256(b"never uploaded by anyone").hexdigest()


@pytest.fixture(params=["sqlite", "postgres"])
def state_overrides(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Config overrides selecting the state backend (a fresh PostgreSQL database each)."""
    if request.param == "sqlite":
        yield {}
        return
    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        message = "PostgreSQL not reachable (SCROLLBACK_TEST_POSTGRES_URL)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + ": required under CI=true")
        pytest.skip(message + ": PostgreSQL tests skipped")
    name = f"scrollback_test_{secrets.token_hex(6)}"
    with admin:
        admin.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(ADMIN_URL)
    yield {"database_url": urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))}
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def pair(secured_pair_factory: Any, state_overrides: dict[str, Any]) -> AsyncIterator[Any]:
    """The authenticated pair on the chosen backend, with sess-a (proj-a) and sess-b (proj-b)."""
    async with secured_pair_factory(
        media_overrides=state_overrides, history_overrides=state_overrides
    ) as started:
        write_transcript(started.root, "proj-a", "sess-a", [text_line("ua0", "hello a")])
        write_transcript(started.root, "proj-b", "sess-b", [text_line("ub0", "hello b")])
        yield started


def _accept(
    history: history_pb2_grpc.HistoryServiceStub,
    who: str,
    txn: str,
    *,
    session_id: str = "",
    chat_key: str = "",
    text: str = "",
    blobs: tuple[str, ...] = (),
) -> Any:
    # session_id and chat_key are one oneof: set only the one given
    target = {"session_id": session_id} if session_id else {"chat_key": chat_key}
    return history.AcceptMessage(
        hpb.AcceptMessageRequest(
            client_txn_id=txn,
            text=text or txn,
            attachments=[
                hpb.Attachment(ref="media:" + sha, name="p.png", media_type="image/png")
                for sha in blobs
            ],
            **target,
        ),
        metadata=auth(who),
    )


async def _refusal(call: Any) -> tuple[grpc.StatusCode, str]:
    """The status code and message of a call that must fail."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code(), raised.value.details() or ""


async def _missing(media: Any, who: str, digests: list[str]) -> list[str]:
    answer = await media.FindMissingBlobs(
        mpb.FindMissingBlobsRequest(sha256=digests), metadata=auth(who)
    )
    return list(answer.missing_sha256)


async def test_a_known_hash_is_not_a_key_for_attaching_or_reading(
    pair: Any, state_overrides: dict[str, Any]
) -> None:
    history, media = pair.history_stub(), pair.media_stub()
    data = png(40_000, 11)
    digest = hashlib.sha256(data).hexdigest()
    selector = mpb.MediaSelector(blob_ref="media:" + digest)
    assert not (await upload(media, data, auth("alice"))).already_existed

    # bob attaching alice's blob answers exactly like attaching one that never existed
    hers = await _refusal(_accept(history, "bob", "b1", chat_key="bobs-chat", blobs=(digest,)))
    never = await _refusal(_accept(history, "bob", "b2", chat_key="bobs-chat", blobs=(NEVER,)))
    assert hers == never
    assert hers[0] == grpc.StatusCode.FAILED_PRECONDITION
    # nothing was recorded, so nothing pins her blob and nothing lets him read it
    pending = await history.Bootstrap(
        hpb.BootstrapRequest(chat_key="bobs-chat"), metadata=auth("bob")
    ).read()
    assert list(pending.header.pending) == []
    if not state_overrides:  # SQLite: look at the rows themselves
        assert db_counts(pair.state)["blob_ref"] == 0
    read = media.ReadMedia(mpb.ReadMediaRequest(media=selector), metadata=auth("bob"))
    assert await status_of(read) == grpc.StatusCode.NOT_FOUND
    assert await _missing(media, "bob", [digest, NEVER]) == [digest, NEVER]
    assert await _missing(media, "alice", [digest, NEVER]) == [NEVER]

    # the same bytes uploaded by bob: stored once, and he is an owner from now on
    mine = await upload(media, data, auth("bob"))
    assert mine.ref == "media:" + digest and not mine.already_existed
    assert await _missing(media, "bob", [digest]) == []
    accepted = await _accept(history, "bob", "b3", chat_key="bobs-chat", blobs=(digest,))
    assert [a.ref for a in accepted.message.attachments] == ["media:" + digest]
    assert await read_blob(media, selector, auth("bob")) == data


async def test_a_message_one_can_see_lets_one_attach_its_blob(pair: Any) -> None:
    history, media = pair.history_stub(), pair.media_stub()
    data = png(30_000, 12)
    digest = hashlib.sha256(data).hexdigest()
    await upload(media, data, auth("alice"))
    before = await _refusal(_accept(history, "admin", "ad1", session_id="sess-a", blobs=(digest,)))
    assert before[0] == grpc.StatusCode.FAILED_PRECONDITION, before
    await _accept(history, "alice", "al1", session_id="sess-a", blobs=(digest,))
    # admin sees proj-a, so alice's message there makes the blob readable, and attachable
    await _accept(history, "admin", "ad2", session_id="sess-a", blobs=(digest,))
    # bob does not see proj-a: still exactly "does not exist"
    after = await _refusal(_accept(history, "bob", "b1", session_id="sess-b", blobs=(digest,)))
    never = await _refusal(_accept(history, "bob", "b2", session_id="sess-b", blobs=(NEVER,)))
    assert after == never


async def _events_until(call: Any, done: Any, seconds: float = 10.0) -> list[Any]:
    """Watch events until `done(event)` is true (or fail after `seconds`)."""
    seen: list[Any] = []
    async with asyncio.timeout(seconds):
        while True:
            event = await call.read()
            assert event is not grpc.aio.EOF
            seen.append(event)
            if done(event):
                return seen


async def _alice_binds_chat_1234(history: history_pb2_grpc.HistoryServiceStub) -> None:
    await _accept(history, "alice", "a1", chat_key="chat-1234", text="alice pending")
    bound = await history.BindChatKey(
        hpb.BindChatKeyRequest(chat_key="chat-1234", session_id="sess-a"), metadata=auth("alice")
    )
    assert bound.bound_messages == 1
    await _accept(history, "alice", "a2", chat_key="chat-1234", text="alice after binding")


async def _alice_pending(history: history_pb2_grpc.HistoryServiceStub) -> list[str]:
    hers = await history.Bootstrap(
        hpb.BootstrapRequest(session_id="sess-a"), metadata=auth("alice")
    ).read()
    return [m.text for m in hers.header.pending]


async def test_bootstrap_on_anothers_chat_key_shows_nothing_of_hers(pair: Any) -> None:
    history = pair.history_stub()
    await _alice_binds_chat_1234(history)
    responses = [
        r
        async for r in history.Bootstrap(
            hpb.BootstrapRequest(chat_key="chat-1234"), metadata=auth("bob")
        )
    ]
    # no session id, no pending, no window of hers: what a never-used key answers
    assert responses[0].header.session_id == "" and list(responses[0].header.pending) == []
    assert [r.WhichOneof("item") for r in responses[1:]] == ["end"]


async def test_accept_and_bind_on_anothers_chat_key_change_nothing_of_hers(pair: Any) -> None:
    history = pair.history_stub()
    await _alice_binds_chat_1234(history)
    mine = await _accept(history, "bob", "b1", chat_key="chat-1234", text="bob's own")
    # it lands in his own (unbound) namespace, not her session
    assert mine.message.session_id == "" and mine.message.chat_key == "chat-1234"
    assert await _alice_pending(history) == ["alice pending", "alice after binding"]
    # binding the key himself is an ordinary first binding: nothing says she used it
    his = await history.BindChatKey(
        hpb.BindChatKeyRequest(chat_key="chat-1234", session_id="sess-b"), metadata=auth("bob")
    )
    assert his.bound_messages == 1
    assert await _alice_pending(history) == ["alice pending", "alice after binding"]
    again = await _accept(history, "alice", "a3", chat_key="chat-1234", text="alice again")
    assert again.message.session_id == "sess-a"


async def test_watch_on_anothers_chat_key_streams_nothing_of_hers(pair: Any) -> None:
    history = pair.history_stub()
    await _alice_binds_chat_1234(history)
    watch = history.WatchSession(
        hpb.WatchSessionRequest(chat_key="chat-1234"), metadata=auth("bob")
    )
    try:
        await _events_until(watch, lambda e: e.WhichOneof("event") == "heartbeat")
        await _accept(history, "alice", "a3", chat_key="chat-1234", text="alice while bob watches")
        await _accept(history, "bob", "b1", chat_key="chat-1234", text="bob's own")
        events = await _events_until(
            watch,
            lambda e: e.WhichOneof("event") == "accepted" and e.accepted.text == "bob's own",
        )
    finally:
        watch.cancel()
    texts = [e.accepted.text for e in events if e.WhichOneof("event") == "accepted"]
    assert texts == ["bob's own"]
    assert not any(e.WhichOneof("event") == "entry" for e in events), "none of her transcript"


async def test_binding_first_captures_nothing_of_another(pair: Any) -> None:
    history = pair.history_stub()
    await history.BindChatKey(
        hpb.BindChatKeyRequest(chat_key="chat-9", session_id="sess-b"), metadata=auth("bob")
    )
    hers = await _accept(history, "alice", "a1", chat_key="chat-9", text="alice first")
    assert hers.message.session_id == "", "her key is unbound in her namespace"
    bobs = await history.Bootstrap(
        hpb.BootstrapRequest(session_id="sess-b"), metadata=auth("bob")
    ).read()
    assert list(bobs.header.pending) == []
    mine = await history.Bootstrap(
        hpb.BootstrapRequest(chat_key="chat-9"), metadata=auth("alice")
    ).read()
    assert mine.header.session_id == "" and [m.text for m in mine.header.pending] == ["alice first"]
    # her own binding is not refused by his, and moves only her message
    moved = await history.BindChatKey(
        hpb.BindChatKeyRequest(chat_key="chat-9", session_id="sess-a"), metadata=auth("alice")
    )
    assert moved.bound_messages == 1
    later = await _accept(history, "alice", "a2", chat_key="chat-9", text="alice later")
    his = await _accept(history, "bob", "b1", chat_key="chat-9", text="bob later")
    assert (later.message.session_id, his.message.session_id) == ("sess-a", "sess-b")
    a_pending = await history.Bootstrap(
        hpb.BootstrapRequest(session_id="sess-a"), metadata=auth("alice")
    ).read()
    b_pending = await history.Bootstrap(
        hpb.BootstrapRequest(session_id="sess-b"), metadata=auth("bob")
    ).read()
    assert [m.text for m in a_pending.header.pending] == ["alice first", "alice later"]
    assert [m.text for m in b_pending.header.pending] == ["bob later"]
