"""Symlinks and unknown ids against real servers (docs/contract.md §11).

A transcript is the file under its own project dir: a link whose target
leaves that dir does not exist for either service (not listed, NOT_FOUND) and
never makes a real session ambiguous; a link inside its own project dir is a
transcript. A miss lists no directory: the index's own counter shows it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import grpc

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.ref.v1 import ref_pb2
from tests.support.security import (
    auth,
    image_line,
    media_ref,
    png,
    read_blob,
    status_of,
    text_line,
    write_transcript,
)

NOT_FOUND = grpc.StatusCode.NOT_FOUND
OK = grpc.StatusCode.OK


async def _window(
    stub: history_pb2_grpc.HistoryServiceStub, session_id: str, who: str
) -> tuple[grpc.StatusCode, str, list[str]]:
    """(status, details, entry uuids) of the latest window."""
    uuids: list[str] = []
    try:
        async for item in stub.ReadWindow(
            hpb.ReadWindowRequest(session_id=session_id), metadata=auth(who)
        ):
            if item.WhichOneof("item") == "entry":
                uuids.append(item.entry.uuid)
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or "", uuids
    return OK, "", uuids


def _as_session(ref: ref_pb2.MediaRef, session_id: str) -> mpb.MediaSelector:
    copy = ref_pb2.MediaRef()
    copy.CopyFrom(ref)
    copy.session_id = session_id
    return mpb.MediaSelector(media_ref=copy)


async def _listed(stub: history_pb2_grpc.HistoryServiceStub, who: str) -> list[str]:
    reply = await stub.ListSessions(hpb.ListSessionsRequest(), metadata=auth(who))
    return sorted(s.session_id for s in reply.sessions)


def _alices_session(root: Path) -> bytes:
    line = image_line("ua1", png(40_000, 1))
    write_transcript(root, "proj-a", "sess-a", [text_line("ua0", "hello a"), line])
    write_transcript(root, "proj-b", "sess-b", [text_line("ub0", "hello b")])
    return line


async def test_a_link_out_of_its_project_does_not_block_a_real_session(
    secured_pair_factory: Any, tmp_path: Path
) -> None:
    async with secured_pair_factory() as pair:
        line = _alices_session(pair.root)
        outside = tmp_path / "outside.jsonl"
        outside.write_bytes(text_line("x0", "planted") + b"\n")
        # links named like alice's session: from bob's project to outside the
        # root, and a sub-agent file in alice's own project to outside the root
        (pair.root / "proj-b" / "sess-a.jsonl").symlink_to(outside)
        subagents = pair.root / "proj-a" / "sess-z" / "subagents"
        subagents.mkdir(parents=True)
        (subagents / "sess-a.jsonl").symlink_to(outside)
        history, media = pair.history_stub(), pair.media_stub()
        for who in ("admin", "alice"):
            assert await _window(history, "sess-a", who) == (OK, "", ["ua0", "ua1"]), who
            selector = mpb.MediaSelector(media_ref=media_ref("sess-a", line))
            assert await read_blob(media, selector, auth(who)) == png(40_000, 1)
        assert await _listed(history, "admin") == ["sess-a", "sess-b"]


async def test_a_link_into_another_project_does_not_exist(secured_pair_factory: Any) -> None:
    async with secured_pair_factory() as pair:
        line = _alices_session(pair.root)
        (pair.root / "proj-b" / "stolen.jsonl").symlink_to("../proj-a/sess-a.jsonl")
        (pair.root / "proj-b" / "sess-b" / "subagents").mkdir(parents=True)
        (pair.root / "proj-b" / "sess-b" / "subagents" / "agent-s.jsonl").symlink_to(
            "../../../proj-a/sess-a.jsonl"
        )
        history, media = pair.history_stub(), pair.media_stub()
        nonexistent = await _window(history, "nope", "bob")
        assert nonexistent[0] == NOT_FOUND
        for session_id in ("stolen", "agent-s"):
            for who in ("bob", "admin"):
                # the same answer as a session that does not exist
                assert await _window(history, session_id, who) == nonexistent
                selector = _as_session(media_ref("sess-a", line), session_id)
                read = media.ReadMedia(mpb.ReadMediaRequest(media=selector), metadata=auth(who))
                assert await status_of(read) == NOT_FOUND
                stat = await media.StatMedia(
                    mpb.StatMediaRequest(media=[selector]), metadata=auth(who)
                )
                assert stat.results[0].error.code == "NOT_FOUND"
        assert await _listed(history, "bob") == ["sess-b"]
        assert await _listed(history, "admin") == ["sess-a", "sess-b"]


async def test_a_link_inside_its_own_project_is_a_transcript(secured_pair_factory: Any) -> None:
    async with secured_pair_factory() as pair:
        line = _alices_session(pair.root)
        (pair.root / "proj-a" / "alias.jsonl").symlink_to("sess-a.jsonl")
        history, media = pair.history_stub(), pair.media_stub()
        assert await _window(history, "alias", "alice") == (OK, "", ["ua0", "ua1"])
        selector = _as_session(media_ref("sess-a", line), "alias")
        assert await read_blob(media, selector, auth("alice")) == png(40_000, 1)
        assert await _listed(history, "alice") == ["alias", "sess-a"]
        assert (await _window(history, "alias", "bob"))[0] == NOT_FOUND


async def test_unknown_ids_list_no_directory_and_new_sessions_show_at_once(
    secured_pair_factory: Any,
) -> None:
    async with secured_pair_factory() as pair:
        _alices_session(pair.root)
        for index in range(30):
            write_transcript(pair.root, f"proj-{index}", f"s-{index}", [text_line("u", "x")])
        past = time.time() - 60  # no directory looks freshly changed to the index
        for directory in [pair.root, *(p for p in pair.root.rglob("*") if p.is_dir())]:
            os.utime(directory, (past, past))
        history = pair.history_stub()
        index = pair.history.core.root
        assert (await _window(history, "sess-b", "bob"))[0] == OK
        scans = index.dir_scans
        for number in range(300):
            assert (await _window(history, f"nope-{number}", "bob"))[0] == NOT_FOUND
            assert (await _window(history, "sess-a", "bob"))[0] == NOT_FOUND  # hidden
        assert index.dir_scans == scans
        write_transcript(pair.root, "proj-b", "fresh", [text_line("uf", "new")])
        assert await _window(history, "fresh", "bob") == (OK, "", ["uf"])
        assert index.dir_scans - scans == 1  # proj-b only, not the root's 33 dirs
