"""A delegate token acting for a principal (`scrollback-on-behalf-of`), over real servers.

alice sees proj-a, bob proj-b, admin everything; `relay` is a delegate token
for the RPCs these tests call (its entry lists them) that sees nothing by itself. Acting for alice, relay gets
exactly alice's view and takes alice's budget of concurrent calls; a token
that is no delegate gets nothing from the header but PERMISSION_DENIED with
an ErrorInfo reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from client.errors import DelegationNotAllowed, UnknownPrincipal, from_rpc_error
from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.server.auth import ON_BEHALF_OF, AuthConfigError, TokenTable
from tests.support.reasons import assert_reason
from tests.support.security import (
    PROJECTS,
    TOKENS,
    auth,
    eventually_admitted,
    image_line,
    media_ref,
    png,
    read_blob,
    text_line,
    write_transcript,
)

RELAY = "relay-secret-token"


def _tokens(path: Path) -> Path:
    lines = ["tokens:"]
    for name, token in TOKENS.items():
        lines += [
            f"  - token: {token}",
            f"    principal: {name}",
            f"    projects: {PROJECTS[name]!r}",
        ]
    lines += [
        f"  - token: {RELAY}",
        "    principal: relay",
        "    delegate: [ListSessions, WatchSession, ReadMedia]",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _relay(*names: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {RELAY}"), *((ON_BEHALF_OF, name) for name in names))


def _fill(root: Path) -> dict[str, mpb.MediaSelector]:
    lines = {"a": image_line("ua1", png(50_000, 1)), "b": image_line("ub1", png(50_000, 2))}
    write_transcript(root, "proj-a", "sess-a", [text_line("ua0", "hello a"), lines["a"]])
    write_transcript(root, "proj-b", "sess-b", [text_line("ub0", "hello b"), lines["b"]])
    return {
        "a": mpb.MediaSelector(media_ref=media_ref("sess-a", lines["a"])),
        "b": mpb.MediaSelector(media_ref=media_ref("sess-b", lines["b"])),
    }


async def test_a_delegate_acting_for_alice_sees_exactly_what_alice_sees(
    secured_pair_factory: Any, tmp_path: Path
) -> None:
    async with secured_pair_factory(auth_tokens=_tokens(tmp_path / "delegates.yaml")) as pair:
        photos = _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        listed = await history.ListSessions(hpb.ListSessionsRequest(), metadata=_relay("alice"))
        assert [s.session_id for s in listed.sessions] == ["sess-a"]
        mine = await read_blob(media, photos["a"], metadata=_relay("alice"))
        assert mine == await read_blob(media, photos["a"], metadata=auth("alice"))
        for metadata in (_relay("alice"), _relay(), auth("alice")):
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await read_blob(media, photos["b"], metadata=metadata)
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        assert await read_blob(media, photos["b"], metadata=_relay("bob")) == await read_blob(
            media, photos["b"], metadata=auth("admin")
        )


async def test_only_a_delegate_may_name_a_principal(
    secured_pair_factory: Any, tmp_path: Path
) -> None:
    async with secured_pair_factory(auth_tokens=_tokens(tmp_path / "delegates.yaml")) as pair:
        photos = _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        # bob's token naming alice, or admin's (which sees everything anyway): refused.
        for token in ("bob", "admin"):
            metadata = (*auth(token), (ON_BEHALF_OF, "alice"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await read_blob(media, photos["a"], metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert_reason(refused.value, Reason.DELEGATION_NOT_ALLOWED)
            assert isinstance(from_rpc_error(refused.value), DelegationNotAllowed)
            assert RELAY not in (refused.value.details() or "")
        # A delegate naming nobody, itself, or two principals: refused.
        for names in (("nobody",), ("relay",), ("alice", "bob"), ("",)):
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await history.ListSessions(hpb.ListSessionsRequest(), metadata=_relay(*names))
            assert unknown.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert_reason(unknown.value, Reason.UNKNOWN_PRINCIPAL)
            assert isinstance(from_rpc_error(unknown.value), UnknownPrincipal)
        # An unknown token is still UNAUTHENTICATED, header or not.
        with pytest.raises(grpc.aio.AioRpcError) as unknown_token:
            await history.ListSessions(
                hpb.ListSessionsRequest(),
                metadata=(("authorization", "Bearer nope"), (ON_BEHALF_OF, "alice")),
            )
        assert unknown_token.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_delegated_calls_take_the_named_principals_budget(
    secured_pair_factory: Any, tmp_path: Path
) -> None:
    async with secured_pair_factory(
        auth_tokens=_tokens(tmp_path / "delegates.yaml"), max_streams_per_principal=2
    ) as pair:
        _fill(pair.root)
        history = pair.history_stub()
        watches = [
            history.WatchSession(
                hpb.WatchSessionRequest(session_id="sess-a"), metadata=_relay("alice")
            )
            for _ in range(2)
        ]
        try:
            for watch in watches:
                await watch.read()  # in flight
            with pytest.raises(grpc.aio.AioRpcError) as full:
                await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
            assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # bob, the relay acting for bob, and the relay itself each have their own budget.
            await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("bob"))
            await history.ListSessions(hpb.ListSessionsRequest(), metadata=_relay("bob"))
            await history.ListSessions(hpb.ListSessionsRequest(), metadata=_relay())
        finally:
            for watch in watches:
                watch.cancel()
        await eventually_admitted(
            lambda: history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        )


def test_the_token_file_marks_delegates_and_names_them_unambiguously() -> None:
    table = TokenTable.from_data(
        {
            "tokens": [
                {"token": "t-alice", "principal": "alice", "projects": ["p"]},
                {"token": "t-alice-2", "principal": "alice", "projects": ["p"]},
                {"token": "t-carol", "principal": "carol", "projects": ["p"]},
                {"token": "t-carol-2", "principal": "carol", "projects": ["q"]},
                {"token": "t-relay", "principal": "relay", "delegate": True},
            ]
        }
    )
    found = table.resolve("t-relay")
    assert found is not None and found[1]
    alice = table.resolve("t-alice")
    assert alice is not None and not alice[1]
    assert table.delegated("alice") == alice[0]
    # Two project lists under one name: no single view to act with, so none.
    assert table.delegated("carol") is None
    assert table.delegated("relay") is None and table.delegated("nobody") is None
    with pytest.raises(AuthConfigError, match="delegate must be true, false or a list"):
        TokenTable.from_data({"tokens": [{"token": "t", "principal": "x", "delegate": "yes"}]})
