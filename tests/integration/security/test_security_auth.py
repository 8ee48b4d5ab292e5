"""Auth: bearer tokens, per-principal visibility of sessions, media and blobs, limits, TLS."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from history_service.config import ConfigError, HistoryConfig
from history_service.server import start_history_server
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.server.auth import AuthConfigError, SecuritySettings, TokenTable
from scrollback.server.listening import BindRefusedError
from tests.support.security import (
    auth,
    eventually_admitted,
    image_line,
    media_ref,
    png,
    read_blob,
    status_of,
    text_line,
    upload,
    write_token_file,
    write_transcript,
)

UNAUTH = grpc.StatusCode.UNAUTHENTICATED
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def _fill(root: Path) -> dict[str, bytes]:
    lines = {
        "sa": image_line("ua1", png(50_000, 1)),
        "sb": image_line("ub1", png(50_000, 2)),
    }
    write_transcript(root, "proj-a", "sess-a", [text_line("ua0", "hello a"), lines["sa"]])
    write_transcript(root, "proj-b", "sess-b", [text_line("ub0", "hello b"), lines["sb"]])
    return lines


async def test_every_rpc_needs_a_known_token_but_health_and_reflection_do_not(
    secured_pair_factory: Any,
) -> None:
    async with secured_pair_factory() as pair:
        _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        for metadata in (
            None,
            (("authorization", "Bearer nope"),),
            (("authorization", "Basic x"),),
        ):
            calls = [
                history.ListSessions(hpb.ListSessionsRequest(), metadata=metadata),
                history.ReadWindow(hpb.ReadWindowRequest(session_id="sess-a"), metadata=metadata),
                history.Bootstrap(hpb.BootstrapRequest(session_id="sess-a"), metadata=metadata),
                history.AcceptMessage(
                    hpb.AcceptMessageRequest(client_txn_id="t1", session_id="sess-a", text="x"),
                    metadata=metadata,
                ),
                history.BindChatKey(
                    hpb.BindChatKeyRequest(chat_key="k", session_id="sess-a"), metadata=metadata
                ),
                history.WatchSession(
                    hpb.WatchSessionRequest(session_id="sess-a"), metadata=metadata
                ),
                media.ReadMedia(
                    mpb.ReadMediaRequest(media=mpb.MediaSelector(blob_ref="media:" + "0" * 64)),
                    metadata=metadata,
                ),
                media.StatMedia(mpb.StatMediaRequest(), metadata=metadata),
                media.FindMissingBlobs(mpb.FindMissingBlobsRequest(), metadata=metadata),
                upload(media, b"abc", metadata=metadata),
            ]
            for call in calls:
                assert await status_of(call) == UNAUTH
        for port in (pair.history.port, pair.media.port):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest()
                )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # with a token, the same channel works
        listed = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        assert [s.session_id for s in listed.sessions] == ["sess-a"]


async def test_sessions_outside_your_projects_do_not_exist(secured_pair_factory: Any) -> None:
    async with secured_pair_factory() as pair:
        lines = _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        admin = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("admin"))
        assert sorted(s.session_id for s in admin.sessions) == ["sess-a", "sess-b"]
        bob = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("bob"))
        assert [s.session_id for s in bob.sessions] == ["sess-b"]

        async def details(call: Any) -> tuple[grpc.StatusCode, str]:
            try:
                if hasattr(call, "__aiter__"):
                    async for _ in call:
                        pass
                else:
                    await call
            except grpc.aio.AioRpcError as error:
                return error.code(), error.details() or ""
            return grpc.StatusCode.OK, ""

        for session in ("sess-b", "sess-nonexistent"):
            a = auth("alice")
            outcomes = [
                await details(
                    history.ReadWindow(hpb.ReadWindowRequest(session_id=session), metadata=a)
                ),
                await details(
                    history.Bootstrap(hpb.BootstrapRequest(session_id=session), metadata=a)
                ),
                await details(
                    history.AcceptMessage(
                        hpb.AcceptMessageRequest(
                            client_txn_id="tx-" + session, session_id=session, text="hi"
                        ),
                        metadata=a,
                    )
                ),
                await details(
                    history.BindChatKey(
                        hpb.BindChatKeyRequest(chat_key="ck", session_id=session), metadata=a
                    )
                ),
                await details(
                    history.WatchSession(
                        hpb.WatchSessionRequest(session_id=session), metadata=a, timeout=2
                    )
                ),
            ]
            assert all(code == NOT_FOUND for code, _ in outcomes), outcomes
        # the same details for "someone else's" and "does not exist"
        other = await details(
            history.ReadWindow(hpb.ReadWindowRequest(session_id="sess-b"), metadata=auth("alice"))
        )
        none = await details(
            history.ReadWindow(hpb.ReadWindowRequest(session_id="nope"), metadata=auth("alice"))
        )
        assert other == none
        # transcript media refs follow the same rule
        ref_b = media_ref("sess-b", lines["sb"])
        selector = mpb.MediaSelector(media_ref=ref_b)
        assert (
            await status_of(
                media.ReadMedia(mpb.ReadMediaRequest(media=selector), metadata=auth("alice"))
            )
            == NOT_FOUND
        )
        stat = await media.StatMedia(mpb.StatMediaRequest(media=[selector]), metadata=auth("alice"))
        assert stat.results[0].error.code == "NOT_FOUND"
        assert await read_blob(media, selector, auth("bob")) == png(50_000, 2)
        assert await read_blob(media, selector, auth("admin")) == png(50_000, 2)
        # nothing was accepted by the refused calls
        accepted = await history.Bootstrap(
            hpb.BootstrapRequest(session_id="sess-b"), metadata=auth("bob")
        ).read()
        assert list(accepted.header.pending) == []


async def test_blobs_are_readable_by_owners_and_by_readers_of_a_referencing_message(
    secured_pair_factory: Any,
) -> None:
    async with secured_pair_factory() as pair:
        _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        data = png(30_000, 9)
        digest = hashlib.sha256(data).hexdigest()
        selector = mpb.MediaSelector(blob_ref="media:" + digest)
        written = await upload(media, data, auth("alice"))
        assert written.ref == "media:" + digest
        assert await read_blob(media, selector, auth("alice")) == data
        for name in ("bob", "admin"):
            assert (
                await status_of(
                    media.ReadMedia(mpb.ReadMediaRequest(media=selector), metadata=auth(name))
                )
                == NOT_FOUND
            )
            missing = await media.FindMissingBlobs(
                mpb.FindMissingBlobsRequest(sha256=[digest]), metadata=auth(name)
            )
            assert list(missing.missing_sha256) == [digest]
        assert (
            list(
                (
                    await media.FindMissingBlobs(
                        mpb.FindMissingBlobsRequest(sha256=[digest]), metadata=auth("alice")
                    )
                ).missing_sha256
            )
            == []
        )
        # alice attaches it to a message in proj-a: admin (sees proj-a) may now read it, bob not
        await history.AcceptMessage(
            hpb.AcceptMessageRequest(
                client_txn_id="att-1",
                session_id="sess-a",
                text="look",
                attachments=[
                    hpb.Attachment(ref="media:" + digest, name="a.png", media_type="image/png")
                ],
            ),
            metadata=auth("alice"),
        )
        assert await read_blob(media, selector, auth("admin")) == data
        assert (
            await status_of(
                media.ReadMedia(mpb.ReadMediaRequest(media=selector), metadata=auth("bob"))
            )
            == NOT_FOUND
        )
        # a re-upload of the same bytes makes bob an owner too (alice's copy is not revealed)
        again = await upload(media, data, auth("bob"))
        assert not again.already_existed
        assert (await upload(media, data, auth("bob"))).already_existed
        assert await read_blob(media, selector, auth("bob")) == data
        # a chat-key message is visible to the principal that accepted it only
        await history.AcceptMessage(
            hpb.AcceptMessageRequest(client_txn_id="ck-1", chat_key="chat-1", text="new chat"),
            metadata=auth("alice"),
        )
        mine = await history.Bootstrap(
            hpb.BootstrapRequest(chat_key="chat-1"), metadata=auth("alice")
        ).read()
        theirs = await history.Bootstrap(
            hpb.BootstrapRequest(chat_key="chat-1"), metadata=auth("bob")
        ).read()
        assert [m.text for m in mine.header.pending] == ["new chat"]
        assert list(theirs.header.pending) == []
        # bob sending with alice's txn id gets neither her record nor a conflict (which
        # would tell him the id was used): ids are per principal, his message is his own
        sent = await history.AcceptMessage(
            hpb.AcceptMessageRequest(client_txn_id="ck-1", chat_key="chat-1", text="new chat"),
            metadata=auth("bob"),
        )
        assert not sent.replayed
        theirs = await history.Bootstrap(
            hpb.BootstrapRequest(chat_key="chat-1"), metadata=auth("bob")
        ).read()
        assert [m.text for m in theirs.header.pending] == ["new chat"]
        mine = await history.Bootstrap(
            hpb.BootstrapRequest(chat_key="chat-1"), metadata=auth("alice")
        ).read()
        assert [m.text for m in mine.header.pending] == ["new chat"]
        assert mine.header.pending[0].seq != theirs.header.pending[0].seq


async def test_concurrent_calls_per_principal_are_limited(secured_pair_factory: Any) -> None:
    async with secured_pair_factory(max_streams_per_principal=2) as pair:
        _fill(pair.root)
        history = pair.history_stub()
        watches = [
            history.WatchSession(
                hpb.WatchSessionRequest(session_id="sess-a"), metadata=auth("alice")
            )
            for _ in range(2)
        ]
        for watch in watches:
            await watch.read()  # the first heartbeat or entry: the call is in flight
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_streams_per_principal" in (raised.value.details() or "")
        assert "2" in (raised.value.details() or "")
        # another principal is not affected
        await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("bob"))
        for watch in watches:
            watch.cancel()
        await eventually_admitted(
            lambda: history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        )


async def test_bind_rule_and_token_file_validation(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    config = HistoryConfig.from_env(
        {}, transcripts=root, state_dir=tmp_path / "s", addr="0.0.0.0:0"
    )
    with pytest.raises(BindRefusedError):
        await start_history_server(config)
    secured = HistoryConfig.from_env(
        {"SCROLLBACK_AUTH_TOKENS": str(write_token_file(tmp_path / "t.yaml"))},
        transcripts=root,
        state_dir=tmp_path / "s",
        addr="0.0.0.0:0",
    )
    server = await start_history_server(secured)
    await server.stop(0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("tokens: [{principal: x}]\n")
    with pytest.raises(ConfigError) as raised:
        HistoryConfig.from_env(
            {"SCROLLBACK_AUTH_TOKENS": str(bad)}, transcripts=root, state_dir=tmp_path / "s"
        )
        await start_history_server(
            HistoryConfig.from_env(
                {"SCROLLBACK_AUTH_TOKENS": str(bad)},
                transcripts=root,
                state_dir=tmp_path / "s",
                addr="127.0.0.1:0",
            )
        )
    assert "token" in str(raised.value)
    json_file = tmp_path / "t.json"
    json_file.write_text('{"tokens": [{"token": "abc", "principal": "p", "projects": ["*"]}]}')
    table = TokenTable.from_file(json_file)
    principal = table.lookup("abc")
    assert principal is not None and principal.sees_project("anything")
    assert table.lookup("abd") is None
    # A name goes into the state database as text: U+0000 is refused at start (rule of §9).
    json_file.write_text('{"tokens": [{"token": "abc", "principal": "p\\u0000"}]}')
    with pytest.raises(AuthConfigError) as refused:
        TokenTable.from_file(json_file)
    assert "U+0000" in str(refused.value)


def _certificates(directory: Path) -> dict[str, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    ca_key = key()
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("scrollback test CA"))
        .issuer_name(name("scrollback test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common: str, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        leaf_key = key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(ca.subject)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()), leaf_key

    files: dict[str, Path] = {}

    def save(
        label: str, cert: x509.Certificate, private: ec.EllipticCurvePrivateKey | None
    ) -> None:
        files[label + "_cert"] = directory / f"{label}.crt"
        files[label + "_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if private is not None:
            files[label + "_key"] = directory / f"{label}.key"
            files[label + "_key"].write_bytes(
                private.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )

    save("ca", ca, None)
    save("server", *leaf("localhost", True))
    save("client", *leaf("client", False))
    return files


async def _list_over(channel: grpc.aio.Channel) -> grpc.StatusCode:
    stub = history_pb2_grpc.HistoryServiceStub(channel)
    return await status_of(stub.ListSessions(hpb.ListSessionsRequest(), timeout=5))


@pytest.mark.parametrize("mutual", [False, True])
async def test_tls_and_mutual_tls(tmp_path: Path, mutual: bool) -> None:
    files = _certificates(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    settings = SecuritySettings(
        tls_cert=files["server_cert"],
        tls_key=files["server_key"],
        tls_client_ca=files["ca_cert"] if mutual else None,
    )
    config = HistoryConfig.from_env(
        {}, transcripts=root, state_dir=tmp_path / "s", addr="127.0.0.1:0", security=settings
    )
    server = await start_history_server(config)
    target = f"localhost:{server.port}"
    try:
        ca = files["ca_cert"].read_bytes()
        with_cert = grpc.ssl_channel_credentials(
            ca, files["client_key"].read_bytes(), files["client_cert"].read_bytes()
        )
        without_cert = grpc.ssl_channel_credentials(ca)
        async with grpc.aio.secure_channel(target, with_cert) as channel:
            assert await _list_over(channel) == grpc.StatusCode.OK
        async with grpc.aio.secure_channel(target, without_cert) as channel:
            expected = grpc.StatusCode.UNAVAILABLE if mutual else grpc.StatusCode.OK
            assert await _list_over(channel) == expected
        async with grpc.aio.insecure_channel(target) as channel:
            assert await _list_over(channel) == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)
