"""The bad-input matrix: every RPC with missing, malformed, oversize, non-UTF-8 and hostile fields.

Each case expects one clear status; afterwards the server is still healthy,
the database row counts and the blob dir are unchanged, and no error detail
echoes a path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from tests.support.security import (
    auth,
    blob_files,
    db_counts,
    image_line,
    png,
    text_line,
    write_transcript,
)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
TOO_BIG = grpc.StatusCode.RESOURCE_EXHAUSTED
HOSTILE_IDS = ["", "../etc", "a/b", "/etc/passwd", "a\x00b", "x" * 10_000, "sess\u00e9", "..", " s"]
GOOD_PIN = "0" * 32
SHA = hashlib.sha256(b"x").hexdigest()


def _history_cases(
    h: history_pb2_grpc.HistoryServiceStub,
) -> list[tuple[str, Callable[[], Any], set[grpc.StatusCode]]]:
    cases: list[tuple[str, Callable[[], Any], set[grpc.StatusCode]]] = []
    for bad in HOSTILE_IDS:
        cases += [
            (
                f"ReadWindow id {bad[:12]!r}",
                lambda b=bad: h.ReadWindow(hpb.ReadWindowRequest(session_id=b)),
                {INVALID},
            ),
            (
                f"Bootstrap id {bad[:12]!r}",
                lambda b=bad: h.Bootstrap(hpb.BootstrapRequest(session_id=b)),
                {INVALID},
            ),
            (
                f"Bootstrap key {bad[:12]!r}",
                lambda b=bad: h.Bootstrap(hpb.BootstrapRequest(chat_key=b)),
                {INVALID},
            ),
            (
                f"Accept txn {bad[:12]!r}",
                lambda b=bad: h.AcceptMessage(
                    hpb.AcceptMessageRequest(client_txn_id=b, session_id="sess-1", text="t")
                ),
                {INVALID},
            ),
            (
                f"Accept id {bad[:12]!r}",
                lambda b=bad: h.AcceptMessage(
                    hpb.AcceptMessageRequest(client_txn_id="t1", session_id=b, text="t")
                ),
                {INVALID},
            ),
            (
                f"Accept key {bad[:12]!r}",
                lambda b=bad: h.AcceptMessage(
                    hpb.AcceptMessageRequest(client_txn_id="t1", chat_key=b, text="t")
                ),
                {INVALID},
            ),
            (
                f"Bind key {bad[:12]!r}",
                lambda b=bad: h.BindChatKey(
                    hpb.BindChatKeyRequest(chat_key=b, session_id="sess-1")
                ),
                {INVALID},
            ),
            (
                f"Bind id {bad[:12]!r}",
                lambda b=bad: h.BindChatKey(hpb.BindChatKeyRequest(chat_key="k", session_id=b)),
                {INVALID},
            ),
            (
                f"Watch id {bad[:12]!r}",
                lambda b=bad: h.WatchSession(hpb.WatchSessionRequest(session_id=b), timeout=3),
                {INVALID},
            ),
        ]
    cases += [
        (
            "ListSessions negative size",
            lambda: h.ListSessions(hpb.ListSessionsRequest(page_size=-1)),
            {INVALID},
        ),
        (
            "ListSessions garbage token",
            lambda: h.ListSessions(hpb.ListSessionsRequest(page_token="!!not a token")),
            {INVALID},
        ),
        (
            "ListSessions huge token",
            lambda: h.ListSessions(hpb.ListSessionsRequest(page_token="A" * 10_000)),
            {INVALID},
        ),
        (
            "ListSessions hostile project",
            lambda: h.ListSessions(hpb.ListSessionsRequest(project_dir="../../etc")),
            {grpc.StatusCode.OK},
        ),
        (
            "ReadWindow negative size",
            lambda: h.ReadWindow(hpb.ReadWindowRequest(session_id="sess-1", page_size=-5)),
            {INVALID},
        ),
        (
            "ReadWindow garbage token",
            lambda: h.ReadWindow(hpb.ReadWindowRequest(session_id="sess-1", page_token="garbage")),
            {INVALID},
        ),
        (
            "ReadWindow huge token",
            lambda: h.ReadWindow(
                hpb.ReadWindowRequest(session_id="sess-1", page_token="A" * 10_000)
            ),
            {INVALID},
        ),
        (
            "ReadWindow unknown direction",
            lambda: h.ReadWindow(hpb.ReadWindowRequest(session_id="sess-1", direction=99)),
            {INVALID},
        ),  # type: ignore[arg-type]
        (
            "ReadWindow negative direction",
            lambda: h.ReadWindow(hpb.ReadWindowRequest(session_id="sess-1", direction=-1)),
            {INVALID},
        ),  # type: ignore[arg-type]
        (
            "ReadWindow unknown media mode",
            lambda: h.ReadWindow(hpb.ReadWindowRequest(session_id="sess-1", media_mode=7)),
            {INVALID},
        ),  # type: ignore[arg-type]
        (
            "ReadWindow huge inline limit",
            lambda: h.ReadWindow(
                hpb.ReadWindowRequest(session_id="sess-1", inline_limit_bytes=2**32 - 1)
            ),
            {INVALID},
        ),
        (
            "ReadWindow tiny inline limit",
            lambda: h.ReadWindow(hpb.ReadWindowRequest(session_id="sess-1", inline_limit_bytes=1)),
            {INVALID},
        ),
        ("Bootstrap nothing", lambda: h.Bootstrap(hpb.BootstrapRequest()), {INVALID}),
        (
            "Bootstrap negative size",
            lambda: h.Bootstrap(hpb.BootstrapRequest(session_id="sess-1", page_size=-1)),
            {INVALID},
        ),
        (
            "Bootstrap unknown mode",
            lambda: h.Bootstrap(hpb.BootstrapRequest(session_id="sess-1", media_mode=42)),
            {INVALID},
        ),  # type: ignore[arg-type]
        ("Accept nothing", lambda: h.AcceptMessage(hpb.AcceptMessageRequest()), {INVALID}),
        (
            "Accept no target",
            lambda: h.AcceptMessage(hpb.AcceptMessageRequest(client_txn_id="t1", text="x")),
            {INVALID},
        ),
        (
            "Accept oversize text",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1", session_id="sess-1", text="x" * (1024 * 1024 + 1)
                )
            ),
            {TOO_BIG},
        ),
        (
            "Accept too many attachments",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="media:" + SHA)] * 33,
                )
            ),
            {TOO_BIG},
        ),
        (
            "Accept hostile ref",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="media:../../etc/passwd")],
                )
            ),
            {INVALID},
        ),
        (
            "Accept path ref",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="/etc/passwd")],
                )
            ),
            {INVALID},
        ),
        (
            "Accept upper-hex ref",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="media:" + SHA.upper())],
                )
            ),
            {INVALID},
        ),
        (
            "Accept NUL ref",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="media:" + SHA[:-1] + "\x00")],
                )
            ),
            {INVALID},
        ),
        (
            "Accept huge name",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="media:" + SHA, name="n" * 10_000)],
                )
            ),
            {INVALID},
        ),
        (
            "Accept missing blob",
            lambda: h.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id="t1",
                    session_id="sess-1",
                    attachments=[hpb.Attachment(ref="media:" + SHA)],
                )
            ),
            {grpc.StatusCode.FAILED_PRECONDITION},
        ),
        ("Watch nothing", lambda: h.WatchSession(hpb.WatchSessionRequest(), timeout=3), {INVALID}),
        (
            "Watch garbage position",
            lambda: h.WatchSession(
                hpb.WatchSessionRequest(session_id="sess-1", position="garbage"), timeout=3
            ),
            {INVALID},
        ),
        (
            "Watch huge position",
            lambda: h.WatchSession(
                hpb.WatchSessionRequest(session_id="sess-1", position="A" * 10_000), timeout=3
            ),
            {INVALID},
        ),
        (
            "Watch unknown mode",
            lambda: h.WatchSession(
                hpb.WatchSessionRequest(session_id="sess-1", media_mode=9), timeout=3
            ),
            {INVALID},
        ),  # type: ignore[arg-type]
    ]
    return cases


def _media_cases(
    m: media_pb2_grpc.MediaServiceStub,
) -> list[tuple[str, Callable[[], Any], set[grpc.StatusCode]]]:
    def read(selector: mpb.MediaSelector | None, **kw: Any) -> Any:
        request = (
            mpb.ReadMediaRequest(**kw)
            if selector is None
            else mpb.ReadMediaRequest(media=selector, **kw)
        )
        return m.ReadMedia(request)

    def ref(
        session: str = "sess-1", uuid: str = "u1", index: int = 0, pin: str = GOOD_PIN
    ) -> mpb.MediaSelector:
        return mpb.MediaSelector(
            media_ref=ref_pb2.MediaRef(session_id=session, entry_uuid=uuid, index=index, pin=pin)
        )

    def write(*messages: mpb.WriteBlobRequest) -> Any:
        async def gen() -> Any:
            for message in messages:
                yield message

        return m.WriteBlob(gen())

    header = mpb.WriteBlobRequest(header=mpb.WriteBlobHeader(sha256=SHA, size_bytes=1))
    cases: list[tuple[str, Callable[[], Any], set[grpc.StatusCode]]] = []
    for bad in HOSTILE_IDS:
        cases += [
            (f"ReadMedia session {bad[:12]!r}", lambda b=bad: read(ref(session=b)), {INVALID}),
            (f"ReadMedia uuid {bad[:12]!r}", lambda b=bad: read(ref(uuid=b)), {INVALID}),
            (
                f"ReadMedia blob {bad[:12]!r}",
                lambda b=bad: read(mpb.MediaSelector(blob_ref=b)),
                {INVALID},
            ),
            (
                f"ReadMedia media:{bad[:12]!r}",
                lambda b=bad: read(mpb.MediaSelector(blob_ref="media:" + b)),
                {INVALID},
            ),
        ]
    cases += [
        ("ReadMedia nothing", lambda: read(None), {INVALID}),
        ("ReadMedia empty selector", lambda: read(mpb.MediaSelector()), {INVALID}),
        ("ReadMedia index 10000", lambda: read(ref(index=10_000)), {INVALID}),
        ("ReadMedia bad pin", lambda: read(ref(pin="zz")), {INVALID}),
        ("ReadMedia upper pin", lambda: read(ref(pin="A" * 32)), {INVALID}),
        ("ReadMedia unknown entry", lambda: read(ref(uuid="nope")), {NOT_FOUND}),
        (
            "ReadMedia negative offset",
            lambda: read(ref(), read_offset=-1),
            {INVALID, grpc.StatusCode.OUT_OF_RANGE, NOT_FOUND},
        ),
        (
            "ReadMedia negative limit",
            lambda: read(ref(), read_limit=-1),
            {INVALID, grpc.StatusCode.OUT_OF_RANGE, NOT_FOUND},
        ),
        (
            "ReadMedia unknown blob",
            lambda: read(mpb.MediaSelector(blob_ref="media:" + SHA)),
            {NOT_FOUND},
        ),
        (
            "StatMedia too many",
            lambda: m.StatMedia(mpb.StatMediaRequest(media=[ref()] * 1001)),
            {INVALID},
        ),
        (
            "FindMissing bad digest",
            lambda: m.FindMissingBlobs(mpb.FindMissingBlobsRequest(sha256=["../x"])),
            {INVALID},
        ),
        (
            "FindMissing upper digest",
            lambda: m.FindMissingBlobs(mpb.FindMissingBlobsRequest(sha256=[SHA.upper()])),
            {INVALID},
        ),
        (
            "FindMissing too many",
            lambda: m.FindMissingBlobs(mpb.FindMissingBlobsRequest(sha256=[SHA] * 10_001)),
            {INVALID},
        ),
        ("WriteBlob empty stream", lambda: write(), {INVALID}),
        ("WriteBlob data first", lambda: write(mpb.WriteBlobRequest(data=b"x")), {INVALID}),
        (
            "WriteBlob bad digest",
            lambda: write(
                mpb.WriteBlobRequest(header=mpb.WriteBlobHeader(sha256="../../x", size_bytes=1))
            ),
            {INVALID},
        ),
        ("WriteBlob two headers", lambda: write(header, header), {INVALID}),
        (
            "WriteBlob wrong bytes",
            lambda: write(header, mpb.WriteBlobRequest(data=b"y")),
            {INVALID},
        ),
        (
            "WriteBlob too many bytes",
            lambda: write(header, mpb.WriteBlobRequest(data=b"xx")),
            {INVALID},
        ),
        ("WriteBlob too few bytes", lambda: write(header), {INVALID}),
        (
            "WriteBlob over max size",
            lambda: write(
                mpb.WriteBlobRequest(header=mpb.WriteBlobHeader(sha256=SHA, size_bytes=2**62))
            ),
            {TOO_BIG},
        ),
        (
            "WriteBlob huge media type",
            lambda: write(
                mpb.WriteBlobRequest(
                    header=mpb.WriteBlobHeader(sha256=SHA, size_bytes=1, media_type="t" * 10_000)
                )
            ),
            {INVALID},
        ),
    ]
    return cases


def _raw_cases(
    channel: grpc.aio.Channel, port: str
) -> list[tuple[str, Callable[[], Any], set[grpc.StatusCode]]]:
    """Hand-built serialized requests whose string fields are not UTF-8."""

    def unary(method: str, payload: bytes) -> Any:
        return channel.unary_unary(method, request_serializer=None, response_deserializer=None)(
            payload
        )

    def stream(method: str, payload: bytes) -> Any:
        return channel.unary_stream(method, request_serializer=None, response_deserializer=None)(
            payload, timeout=3
        )

    bad = b"\xff\xfe\xc3("
    field1 = b"\x0a" + bytes([len(bad)]) + bad
    ok = {INVALID, grpc.StatusCode.INTERNAL}
    if port == "history":
        return [
            (
                "raw ListSessions token",
                lambda: unary(
                    "/scrollback.history.v1.HistoryService/ListSessions",
                    b"\x12" + bytes([len(bad)]) + bad,
                ),
                ok,
            ),
            (
                "raw ReadWindow id",
                lambda: stream("/scrollback.history.v1.HistoryService/ReadWindow", field1),
                ok,
            ),
            (
                "raw Accept txn",
                lambda: unary(
                    "/scrollback.history.v1.HistoryService/AcceptMessage", field1 + b"\x12\x02s1"
                ),
                ok,
            ),
            (
                "raw Watch id",
                lambda: stream("/scrollback.history.v1.HistoryService/WatchSession", field1),
                ok,
            ),
            (
                "raw truncated message",
                lambda: unary("/scrollback.history.v1.HistoryService/ListSessions", b"\x12\x50ab"),
                ok,
            ),
        ]
    return [
        (
            "raw ReadMedia blob ref",
            lambda: stream(
                "/scrollback.media.v1.MediaService/ReadMedia",
                b"\x0a" + bytes([len(bad) + 2]) + b"\x12" + bytes([len(bad)]) + bad,
            ),
            ok,
        ),
        (
            "raw FindMissing digest",
            lambda: unary("/scrollback.media.v1.MediaService/FindMissingBlobs", field1),
            ok,
        ),
        (
            "raw garbage",
            lambda: unary("/scrollback.media.v1.MediaService/StatMedia", b"\xff\xff\xff\xff"),
            ok,
        ),
    ]


async def _run(
    name: str, make: Callable[[], Any], expected: set[grpc.StatusCode], failures: list[str]
) -> None:
    call = make()
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
        code, details = grpc.StatusCode.OK, ""
    except grpc.aio.AioRpcError as error:
        code, details = error.code(), error.details() or ""
    if code not in expected:
        failures.append(
            f"{name}: {code.name} {details[:80]!r}, expected {sorted(c.name for c in expected)}"
        )
    if "/tmp" in details or ".jsonl" in details or "Traceback" in details:
        failures.append(f"{name}: details leak {details[:80]!r}")


async def test_hostile_input_is_refused_cleanly_and_changes_nothing(
    secured_pair_factory: Any,
) -> None:
    async with secured_pair_factory(auth=False) as pair:
        write_transcript(
            pair.root, "proj", "sess-1", [text_line("u0", "hi"), image_line("u1", png(40_000))]
        )
        history_channel = grpc.aio.insecure_channel(f"127.0.0.1:{pair.history.port}")
        media_channel = grpc.aio.insecure_channel(f"127.0.0.1:{pair.media.port}")
        pair.channels += [history_channel, media_channel]
        h = history_pb2_grpc.HistoryServiceStub(history_channel)
        m = media_pb2_grpc.MediaServiceStub(media_channel)
        # some state to protect
        await h.AcceptMessage(
            hpb.AcceptMessageRequest(client_txn_id="seed", session_id="sess-1", text="seed")
        )
        counts, files = db_counts(pair.state), blob_files(pair.state)
        failures: list[str] = []
        cases = (
            _history_cases(h)
            + _media_cases(m)
            + _raw_cases(history_channel, "history")
            + _raw_cases(media_channel, "media")
        )
        for name, make, expected in cases:
            await _run(name, make, expected, failures)
        assert not failures, "\n".join(failures)
        assert db_counts(pair.state) == counts
        assert blob_files(pair.state) == files
        for channel in (history_channel, media_channel):
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # and still serving real work
        await h.ListSessions(hpb.ListSessionsRequest())
        assert len(cases) > 100
        _ = auth  # the matrix runs without auth; test_security_auth covers tokens
