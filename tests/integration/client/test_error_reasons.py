"""Errors carry their reason on the wire (google.rpc.ErrorInfo), and the client raises its class.

Each cause that shares a status code with others (FAILED_PRECONDITION: a stale
page token, a pin mismatch) is told apart by its reason, read both as a raw gRPC
client in any language would (the status details) and through the typed client.
"""

from __future__ import annotations

import grpc
import pytest

from client import Client, HistoryClient
from client.errors import (
    FailedPrecondition,
    MediaNotFound,
    NotFound,
    PinMismatch,
    ScrollbackError,
    SessionNotFound,
    TranscriptRewritten,
)
from client.media import stat_error
from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from tests.support.reasons import assert_reason
from tests.support.servers import ServerPair, assistant_line, png, user_line


def _session(pair: ServerPair, session_id: str, lines: int) -> None:
    body = [user_line("e0", "photo", images=(png(3),))]
    body += [assistant_line(f"a{n}", f"answer {n}") for n in range(lines)]
    pair.transcript(session_id).write_bytes(b"".join(body))


def test_raw_status_details_name_the_cause(client_servers: ServerPair) -> None:
    _session(client_servers, "s1", 30)
    with grpc.insecure_channel(client_servers.history_addr) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.RpcError) as missing:
            list(stub.ReadWindow(hpb.ReadWindowRequest(session_id="nope")))
        assert_reason(missing.value, Reason.SESSION_NOT_FOUND)
        with pytest.raises(grpc.RpcError) as negative:
            list(stub.ReadWindow(hpb.ReadWindowRequest(session_id="s1", page_size=-1)))
        assert_reason(negative.value, Reason.INVALID_ARGUMENT)
        # a message that does not parse is refused before any servicer runs
        garbage = channel.unary_stream(
            "/scrollback.history.v1.HistoryService/ReadWindow",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw,
        )
        with pytest.raises(grpc.RpcError) as malformed:
            list(garbage(b"\x0a\xff\xff\xff\xff\x0f"))
        assert_reason(malformed.value, Reason.MALFORMED_REQUEST)
    with grpc.insecure_channel(client_servers.media_addr) as channel:
        media = media_pb2_grpc.MediaServiceStub(channel)
        ref = ref_pb2.MediaRef(session_id="s1", entry_uuid="e0", index=0, pin="0" * 32)
        with pytest.raises(grpc.RpcError) as stale:
            list(media.ReadMedia(mpb.ReadMediaRequest(media=mpb.MediaSelector(media_ref=ref))))
        assert_reason(stale.value, Reason.PIN_MISMATCH)


def test_client_raises_the_class_of_each_reason(client_servers: ServerPair) -> None:
    _session(client_servers, "s2", 30)
    path = client_servers.transcript("s2")
    with (
        HistoryClient(client_servers.history_addr) as history,
        Client(client_servers.history_addr, client_servers.media_addr) as sb,
    ):
        with pytest.raises(SessionNotFound) as missing:
            history.read_window("nope")
        assert isinstance(missing.value, NotFound)
        assert missing.value.reason == Reason.SESSION_NOT_FOUND

        token = history.read_window("s2", page_size=10).next_page_token
        assert token
        # the same bytes at the token's place, then a rewrite: the token is stale
        path.write_bytes(path.read_bytes().replace(b"answer", b"ANSWER"))
        with pytest.raises(TranscriptRewritten) as stale:
            history.read_window("s2", page_token=token)
        assert isinstance(stale.value, FailedPrecondition)
        assert stale.value.reason == Reason.TRANSCRIPT_REWRITTEN

        first = history.read_window("s2", oldest_first=True, page_size=1).entries[0]
        ref = first.media_refs[0]
        with pytest.raises(PinMismatch) as pin:
            sb.media.read_media(ref, pin="0" * 32)
        assert isinstance(pin.value, FailedPrecondition)
        assert not isinstance(pin.value, TranscriptRewritten)
        with pytest.raises(MediaNotFound):
            sb.media.fetch("media:" + "ab" * 32)


def test_stat_media_items_carry_the_reason_read_media_would(client_servers: ServerPair) -> None:
    _session(client_servers, "s3", 2)
    with grpc.insecure_channel(client_servers.media_addr) as channel:
        media = media_pb2_grpc.MediaServiceStub(channel)
        selectors = [
            mpb.MediaSelector(
                media_ref=ref_pb2.MediaRef(session_id="s3", entry_uuid="e0", index=0, pin="0" * 32)
            ),
            mpb.MediaSelector(
                media_ref=ref_pb2.MediaRef(session_id="s3", entry_uuid="e0", index=7, pin="0" * 32)
            ),
        ]
        results = media.StatMedia(mpb.StatMediaRequest(media=selectors)).results
    assert [r.error.reason for r in results] == [Reason.PIN_MISMATCH, Reason.MEDIA_NOT_FOUND]
    assert [r.error.code for r in results] == ["FAILED_PRECONDITION", "NOT_FOUND"]
    errors = [stat_error(r) for r in results]
    assert isinstance(errors[0], PinMismatch) and isinstance(errors[1], MediaNotFound)
    assert all(isinstance(e, ScrollbackError) and e.reason for e in errors)
