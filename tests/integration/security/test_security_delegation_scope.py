"""What a delegate token may do for others: the RPCs its entry lists, never for everyone, over
real servers (SQLite and PostgreSQL state).

alice sees proj-a, bob proj-b, ops every project. `gateway` is marked
`delegate: true` (the photo reads, nothing else), `relay` lists its RPCs
(`delegate: [ReadMedia, StatMedia]`), and `wide` lists ListSessions and
ReadMedia with `delegate_for_all_projects: true`. Any other RPC acting for
someone, or acting for ops without that leave, is PERMISSION_DENIED with
reason DELEGATION_NOT_ALLOWED and changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.server.auth import ON_BEHALF_OF, AuthConfigError, TokenTable
from tests.support.backends import state_backend
from tests.support.reasons import assert_reason
from tests.support.security import (
    PROJECTS,
    TOKENS,
    auth,
    image_line,
    media_ref,
    png,
    read_blob,
    text_line,
    upload,
    write_transcript,
)

DELEGATES = {
    "gateway": ("gateway-secret-token", ["    delegate: true"]),
    "relay": ("relay-secret-token", ["    delegate: [ReadMedia, StatMedia]"]),
    "wide": (
        "wide-secret-token",
        ["    delegate: [ListSessions, ReadMedia]", "    delegate_for_all_projects: true"],
    ),
}
USERS = {**TOKENS, "ops": "ops-secret-token"}
USER_PROJECTS = {**PROJECTS, "ops": ["*"]}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield from state_backend(request.param)


def _tokens(path: Path) -> Path:
    lines = ["tokens:"]
    for name, token in USERS.items():
        lines += [f"  - token: {token}", f"    principal: {name}"]
        lines.append(f"    projects: {USER_PROJECTS[name]!r}")
    for name, (token, marks) in DELEGATES.items():
        lines += [f"  - token: {token}", f"    principal: {name}", *marks]
    path.write_text("\n".join(lines) + "\n")
    return path


def _as(delegate: str, name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {DELEGATES[delegate][0]}"), (ON_BEHALF_OF, name))


def _own(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {USERS[name]}"),)


def _fill(root: Path) -> dict[str, mpb.MediaSelector]:
    lines = {"a": image_line("ua1", png(50_000, 1)), "b": image_line("ub1", png(50_000, 2))}
    write_transcript(root, "proj-a", "sess-a", [text_line("ua0", "hello a"), lines["a"]])
    write_transcript(root, "proj-b", "sess-b", [text_line("ub0", "hello b"), lines["b"]])
    return {
        "a": mpb.MediaSelector(media_ref=media_ref("sess-a", lines["a"])),
        "b": mpb.MediaSelector(media_ref=media_ref("sess-b", lines["b"])),
    }


def _refused(error: pytest.ExceptionInfo[grpc.aio.AioRpcError]) -> None:
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert_reason(error.value, Reason.DELEGATION_NOT_ALLOWED)
    for _, (token, _) in DELEGATES.items():
        assert token not in (error.value.details() or "")


async def test_a_delegate_acts_only_in_the_rpcs_its_entry_lists(
    secured_pair_factory: Any, tmp_path: Path, backend: dict[str, Any]
) -> None:
    async with secured_pair_factory(
        auth_tokens=_tokens(tmp_path / "delegates.yaml"),
        history_overrides=backend,
        media_overrides=backend,
    ) as pair:
        photos = _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        blob = png(5_000, 9)
        digest = hashlib.sha256(blob).hexdigest()
        for delegate in ("gateway", "relay"):
            # What a photo URL needs works, as alice and as bob, within their projects.
            assert await read_blob(media, photos["a"], metadata=_as(delegate, "alice")) == (
                await read_blob(media, photos["a"], metadata=_own("alice"))
            )
            stat = await media.StatMedia(
                mpb.StatMediaRequest(media=[photos["b"]]), metadata=_as(delegate, "bob")
            )
            assert stat.results[0].WhichOneof("result") == "metadata"
            # Everything else acting for someone is refused, whoever it names.
            with pytest.raises(grpc.aio.AioRpcError) as listing:
                await history.ListSessions(hpb.ListSessionsRequest(), metadata=_as(delegate, "ops"))
            _refused(listing)
            with pytest.raises(grpc.aio.AioRpcError) as accept:
                await history.AcceptMessage(
                    hpb.AcceptMessageRequest(
                        client_txn_id=f"txn-{delegate}", session_id="sess-a", text="forged"
                    ),
                    metadata=_as(delegate, "alice"),
                )
            _refused(accept)
            with pytest.raises(grpc.aio.AioRpcError) as write:
                await upload(media, blob, metadata=_as(delegate, "bob"))
            _refused(write)
            # Nor may it read for a principal of every project.
            with pytest.raises(grpc.aio.AioRpcError) as everything:
                await read_blob(media, photos["b"], metadata=_as(delegate, "ops"))
            _refused(everything)
        # The refused calls changed nothing: alice's transaction ids are unused, bob has no blob.
        for delegate in ("gateway", "relay"):
            accepted = await history.AcceptMessage(
                hpb.AcceptMessageRequest(
                    client_txn_id=f"txn-{delegate}", session_id="sess-a", text="mine"
                ),
                metadata=_own("alice"),
            )
            assert not accepted.replayed
        missing = await media.FindMissingBlobs(
            mpb.FindMissingBlobsRequest(sha256=[digest]), metadata=_own("bob")
        )
        assert list(missing.missing_sha256) == [digest]


async def test_acting_for_a_principal_of_every_project_needs_the_tokens_leave(
    secured_pair_factory: Any, tmp_path: Path
) -> None:
    async with secured_pair_factory(auth_tokens=_tokens(tmp_path / "delegates.yaml")) as pair:
        photos = _fill(pair.root)
        history, media = pair.history_stub(), pair.media_stub()
        listed = await history.ListSessions(hpb.ListSessionsRequest(), metadata=_as("wide", "ops"))
        assert sorted(s.session_id for s in listed.sessions) == ["sess-a", "sess-b"]
        assert await read_blob(media, photos["b"], metadata=_as("wide", "ops")) == (
            await read_blob(media, photos["b"], metadata=_own("bob"))
        )
        # Still only its RPCs: no StatMedia, no search, even with leave for everyone.
        with pytest.raises(grpc.aio.AioRpcError) as stat:
            await media.StatMedia(
                mpb.StatMediaRequest(media=[photos["b"]]), metadata=_as("wide", "ops")
            )
        _refused(stat)
        # Acting for alice, it gets alice's view, not ops's.
        mine = await history.ListSessions(hpb.ListSessionsRequest(), metadata=_as("wide", "alice"))
        assert [s.session_id for s in mine.sessions] == ["sess-a"]
        # Its own calls (no header) are its own principal's, which sees nothing.
        alone = await history.ListSessions(hpb.ListSessionsRequest(), metadata=_as("wide", "")[:1])
        assert list(alone.sessions) == []
        # A user's own token is unchanged.
        own = await history.ListSessions(hpb.ListSessionsRequest(), metadata=auth("alice"))
        assert [s.session_id for s in own.sessions] == ["sess-a"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"delegate": ["ReadMedia", "DeleteEverything"]}, "delegate names no RPC"),
        ({"delegate": "yes"}, "delegate must be true, false or a list of RPC names"),
        ({"delegate": [1]}, "delegate must be true, false or a list of RPC names"),
        ({"delegate_for_all_projects": True}, "delegate_for_all_projects needs delegate"),
        ({"delegate": True, "delegate_for_all_projects": "yes"}, "must be true or false"),
    ],
)
def test_a_token_file_declaring_delegation_wrongly_is_refused_at_start(
    entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(AuthConfigError, match=message):
        TokenTable.from_data({"tokens": [{"token": "t", "principal": "x", **entry}]})


def test_delegate_true_means_the_photo_reads_only() -> None:
    table = TokenTable.from_data(
        {"tokens": [{"token": "t", "principal": "gateway", "delegate": True}]}
    )
    found = table.resolve("t")
    assert found is not None and found[1] is not None
    assert found[1].methods == {"ReadMedia", "StatMedia"}
    assert not found[1].for_all_projects
    for off in (False, []):
        none = TokenTable.from_data({"tokens": [{"token": "t", "principal": "x", "delegate": off}]})
        assert none.resolve("t") == (none.principals[0], None)
