"""The media client over real servers: verified reads, the cache, uploads and `send`."""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from client import AsyncClient, Client, HistoryClient, MediaCache
from client.errors import FailedPrecondition, InvalidArgument, NotFound
from tests.support.servers import ServerPair, png, user_line


class CountingInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
):
    """Counts the calls a client channel makes, by method name."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def _count(self, details: Any) -> None:
        self.calls[details.method.rsplit("/", 1)[-1]] += 1

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self._count(details)
        return continuation(details, request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self._count(details)
        return continuation(details, request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, request_iterator: Any
    ) -> Any:
        self._count(details)
        return continuation(details, request_iterator)


def _photo_session(pair: ServerPair) -> tuple[bytes, bytes]:
    first, second = png(1), png(2)
    pair.transcript("p1").write_bytes(
        user_line("e1", "one", images=(first,))
        + user_line("e2", "same photo again", images=(first,))
        + user_line("e3", "two", images=(second, first))
    )
    return first, second


def test_fetch_never_reads_the_same_photo_twice(client_servers: ServerPair) -> None:
    first, second = _photo_session(client_servers)
    counter = CountingInterceptor()
    with (
        HistoryClient(client_servers.history_addr) as history,
        Client(
            client_servers.history_addr, client_servers.media_addr, interceptors=[counter]
        ) as sb,
    ):
        refs = [r for e in history.iter_window("p1") for r in e.media_refs]
        assert [r.uri for r in refs] == ["p1/e1/0", "p1/e2/0", "p1/e3/0", "p1/e3/1"]
        photos = [sb.media.fetch(r).data for r in refs]
        assert photos == [first, first, second, first]
        # two distinct photos: two ReadMedia calls; the copies were found by sha256
        assert counter.calls["ReadMedia"] == 2
        assert counter.calls["StatMedia"] == 4
        before = counter.calls.copy()
        assert [sb.media.fetch(r).data for r in refs] == photos
        blob = sb.media.fetch(f"media:{hashlib.sha256(first).hexdigest()}")
        assert blob.data == first
        assert counter.calls == before, "cache hits must make no call at all"


def test_cache_is_bounded_by_bytes() -> None:
    from client._core import Media
    from scrollback.media.v1 import media_pb2 as mpb

    cache = MediaCache(max_bytes=250)
    for n in range(5):
        data = bytes([n]) * 100
        sha = hashlib.sha256(data).hexdigest()
        cache.put(f"s/e/{n}#pin", Media(mpb.MediaMetadata(sha256=sha, size_bytes=100), data))
    assert cache.size_bytes == 200
    assert cache.lookup("s/e/0#pin") is None and cache.lookup("s/e/4#pin") is not None


def test_read_media_errors_are_typed(client_servers: ServerPair) -> None:
    _photo_session(client_servers)
    with (
        HistoryClient(client_servers.history_addr) as history,
        Client(client_servers.history_addr, client_servers.media_addr) as sb,
    ):
        ref = history.read_window("p1").entries[0].media_refs[0]
        with pytest.raises(FailedPrecondition):
            sb.media.read_media(ref, pin="0" * 32)
        with pytest.raises(NotFound):
            sb.media.read_media("p1/e1/5", pin=ref.pin)
        with pytest.raises(InvalidArgument):
            sb.media.read_media("../etc/passwd", pin=ref.pin)
        with pytest.raises(NotFound):
            sb.media.fetch("media:" + "ab" * 32)


def test_send_uploads_once_and_accepts_once(client_servers: ServerPair, tmp_path: Path) -> None:
    image = tmp_path / "shot.png"
    image.write_bytes(png(9))
    client_servers.transcript("chat1").write_bytes(user_line("u0", "hello"))
    counter = CountingInterceptor()
    with Client(
        client_servers.history_addr, client_servers.media_addr, interceptors=[counter]
    ) as sb:
        accepted = sb.send("chat1", "look at this", images=[image, png(10)])
        assert [a.name for a in accepted.attachments] == ["shot.png", "image-1"]
        assert accepted.attachments[0].ref == "media:" + hashlib.sha256(png(9)).hexdigest()
        assert counter.calls["WriteBlob"] == 2 and counter.calls["FindMissingBlobs"] == 1
        again = sb.send("chat1", "again", images=[image], txn_id="fixed-txn")
        assert counter.calls["WriteBlob"] == 2, "FindMissingBlobs must skip stored blobs"
        replay = sb.send("chat1", "again", images=[image], txn_id="fixed-txn")
        assert replay.seq == again.seq
        keyed = sb.send(None, "new chat", chat_key="k1")
        assert keyed.chat_key == "k1" and not keyed.session_id
        stored = sb.media.fetch(accepted.attachments[1].ref)
        assert stored.data == png(10) and stored.metadata.content_type == "image/png"


async def test_async_client_sends_and_fetches(client_servers: ServerPair) -> None:
    _photo_session(client_servers)
    async with AsyncClient(client_servers.history_addr, client_servers.media_addr) as sb:
        accepted = await sb.send("p1", "async hi", images=[png(3)])
        boot = await sb.history.bootstrap("p1")
        assert boot.header is not None
        assert [m.seq for m in boot.header.pending] == [accepted.seq]
        refs = [r for e in boot.entries for r in e.media_refs]
        photos = [(await sb.media.fetch(r)).data for r in refs]
        assert photos[0] == photos[1] == png(1)
        attached = await sb.media.fetch(accepted.attachments[0].ref)
        assert attached.data == png(3)


class RecordingInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Keeps every request message a client channel sends, by method name."""

    def __init__(self) -> None:
        self.requests: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)

    def _record(self, details: Any, request: Any) -> None:
        self.requests[details.method.rsplit("/", 1)[-1]].append(request)

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self._record(details, request)
        return continuation(details, request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self._record(details, request)
        return continuation(details, request)


def test_the_client_sends_the_line_offset_hint(client_servers: ServerPair) -> None:
    first, second = _photo_session(client_servers)
    recorder = RecordingInterceptor()
    with (
        HistoryClient(client_servers.history_addr) as history,
        Client(
            client_servers.history_addr, client_servers.media_addr, interceptors=[recorder]
        ) as sb,
    ):
        refs = [r for e in history.iter_window("p1") for r in e.media_refs]
        assert [r.HasField("line_offset_hint") for r in refs] == [True] * 4
        assert refs[0].line_offset_hint == 0 and refs[3].line_offset_hint > 0
        assert sb.media.read_media(refs[3]).data == first
        assert sb.media.stat_media(refs)[2].metadata.sha256 == hashlib.sha256(second).hexdigest()
        assert sb.media.fetch(refs[2]).data == second
        sent = [
            selector.media_ref
            for request in recorder.requests["ReadMedia"]
            for selector in [request.media]
        ] + [
            selector.media_ref
            for request in recorder.requests["StatMedia"]
            for selector in request.media
        ]
        by_uri = {(r.session_id, r.entry_uuid, r.index): r for r in refs}
        assert len(sent) >= 1 + 4 + 1
        for ref in sent:
            expected = by_uri[(ref.session_id, ref.entry_uuid, ref.index)]
            assert ref.HasField("line_offset_hint"), ref
            assert ref.line_offset_hint == expected.line_offset_hint
            assert ref.pin == expected.pin
