"""opencode sessions from its SQLite database, through both real servers (docs/contract.md §1).

A database written with opencode's schema (tests/support/opencode.py) beside a
Claude Code session: listed with source "opencode", title, directory as the
project (tenancy filter), parent links; windows of one entry per message in
both directions, every data URL cut and the rest byte-exact; every image ref
(file parts and tool attachments) byte-exact through ReadMedia and
StatMedia; a part rewritten since the window is PIN_MISMATCH; a message still
streaming is held back until it completes, and a watch streams it then;
tokens survive new rows; insight counts assistant tokens by model; search
finds parts' text and never a payload; thumbnails; a
database mid-migration is UNAVAILABLE; a 100 MB part is served without being
loaded whole.
"""

from __future__ import annotations

import base64
import hashlib
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from scrollback_app.cli import main
from tests.integration.history.test_codex_rollouts import Stubs as CodexStubs
from tests.support.history import bytes_read
from tests.support.media import png_bytes
from tests.support.opencode import DIRECTORY, Sample, file_part, write_sample
from tests.support.reasons import assert_reason
from tests.support.servers import ServerPair, png, user_line

# The payloads cut: every image of the sample (the default, 32 KiB, keeps smaller ones inline).
LIMIT = 1024


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    return write_sample(tmp_path / "opencode.db")


@pytest.fixture
def pair(tmp_path: Path, sample: Sample) -> Iterator[ServerPair]:
    made = ServerPair(tmp_path / "root", tmp_path / "state", opencode=sample.db.path)
    try:
        made.start_history(0)
        made.start_media(0)
        yield made
    finally:
        made.close()


class Stubs(CodexStubs):
    """The Codex suite's stubs, with the page size a request's own."""

    def window(self, session_id: str, **request: Any) -> tuple[list[pb.Entry], pb.WindowEnd]:
        entries: list[pb.Entry] = []
        end: pb.WindowEnd | None = None
        request.setdefault("page_size", 200)
        for message in self.history.ReadWindow(
            pb.ReadWindowRequest(session_id=session_id, **request), timeout=10
        ):
            kind = message.WhichOneof("item")
            if kind == "entry":
                entries.append(message.entry)
            elif kind == "end":
                end = message.end
        assert end is not None
        return entries, end


@pytest.fixture
def stubs(pair: ServerPair) -> Iterator[Stubs]:
    made = Stubs(pair)
    try:
        yield made
    finally:
        made.close()


def _message_rows(sample: Sample, session: str) -> list[tuple[str, bytes]]:
    """(message id, data bytes) of a session in opencode's order."""
    return [
        (mid, data.encode())
        for mid, data in sample.db.conn.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id",
            (session,),
        )
    ]


def test_sessions_listed_with_source_title_project_and_parent(
    pair: ServerPair, stubs: Stubs, sample: Sample
) -> None:
    pair.transcript("claude1").write_bytes(user_line("u1", "hello"))
    sessions = stubs.sessions()
    assert sessions["claude1"].source == "claude-code"
    top = sessions[sample.session]
    assert (top.source, top.title, top.project_dir) == ("opencode", "Fix the login page", DIRECTORY)
    child = sessions[sample.child]
    assert child.source == "opencode" and child.is_subagent
    assert child.parent_session_id == sample.session
    assert sessions[sample.other].project_dir == "/home/dev/other"
    only = stubs.history.ListSessions(pb.ListSessionsRequest(project_dir=DIRECTORY), timeout=10)
    assert {s.session_id for s in only.sessions} == {sample.session, sample.child}
    # A prefixed id names the same session.
    entries, _ = stubs.window("opencode:" + sample.session)
    assert entries


def test_window_is_one_entry_per_message_with_payloads_cut_and_the_rest_exact(
    stubs: Stubs, sample: Sample
) -> None:
    entries, end = stubs.window(
        sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
    )
    rows = _message_rows(sample, sample.session)
    # The last message (still streaming) is held back.
    assert [e.uuid for e in entries] == [mid for mid, _ in rows[:-1]]
    assert sample.streaming not in [e.uuid for e in entries]
    for entry, (mid, data) in zip(entries, rows, strict=False):
        assert entry.type == "opencode"
        served = orjson.loads(entry.json)
        assert served["uuid"] == mid
        assert orjson.dumps(served["payload"]["message"]) == orjson.dumps(orjson.loads(data))
        assert ";base64,iVBOR" not in entry.json
    photo = orjson.loads(entries[0].json)["payload"]["parts"][1]["data"]
    assert photo["type"] == "file" and photo["url"].startswith("data:image/png;base64,")
    # Latest first: the same entries, newest page first (each page in file order).
    seen: list[str] = []
    token = ""
    while True:
        page, end = stubs.window(sample.session, page_size=2, page_token=token)
        seen[:0] = [e.uuid for e in page]
        token = end.next_page_token
        if not token:
            break
    assert seen == [mid for mid, _ in rows[:-1]]


def _refs(entries: list[pb.Entry]) -> list[tuple[str, ref_pb2.MediaRef]]:
    return [(e.uuid, r) for e in entries for r in e.media_refs]


def test_every_image_resolves_byte_exact_and_a_rewrite_is_pin_mismatch(
    stubs: Stubs, sample: Sample
) -> None:
    entries, _ = stubs.window(
        sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
    )
    refs = _refs(entries)
    db = sample.db
    # The pasted image, and the tool part's two attachments: each named by its part.
    assert [(mid, len(db.part_images[r.entry_uuid]), r.index) for mid, r in refs] == [
        (sample.photo_message, 1, 0),
        (sample.tool_message, 2, 0),
        (sample.tool_message, 2, 1),
    ]
    for mid, ref in refs:
        assert ref.uri == f"{sample.session}/{ref.entry_uuid}/{ref.index}"
        assert ref.entry_uuid != mid and ref.line_offset_hint == next(
            e.byte_offset for e in entries if e.uuid == mid
        )
        want = db.part_images[ref.entry_uuid][ref.index]
        for hint in (True, False):
            metadata, data = stubs.read(ref, hint=hint)
            assert data == want
            assert metadata.sha256 == hashlib.sha256(want).hexdigest()
            assert metadata.content_type == "image/png"
        # The message's name and the image's place in its line name it too.
        by_message = ref_pb2.MediaRef(
            session_id=sample.session,
            entry_uuid=mid,
            index=db.images[mid].index(want),
            pin=ref.pin,
        )
        assert stubs.read(by_message, hint=False)[1] == want
    stat = stubs.media.StatMedia(
        media_pb2.StatMediaRequest(
            media=[media_pb2.MediaSelector(media_ref=ref) for _, ref in refs]
        ),
        timeout=10,
    )
    assert [s.metadata.size_bytes for s in stat.results] == [
        len(db.part_images[ref.entry_uuid][ref.index]) for _, ref in refs
    ]
    # The pasted image's part rewritten with another image: its old ref is PIN_MISMATCH.
    _, ref = refs[0]
    db.update_part(ref.entry_uuid, file_part(png_bytes(30_000, seed=77)))
    with pytest.raises(grpc.RpcError) as failed:
        stubs.read(ref)
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert_reason(failed.value, Reason.PIN_MISMATCH)
    # A part id of no part, or an index past a part's images: not found.
    for entry_uuid, index in (("prt_none", 0), (refs[1][1].entry_uuid, 2)):
        wrong = ref_pb2.MediaRef(
            session_id=sample.session, entry_uuid=entry_uuid, index=index, pin=ref.pin
        )
        with pytest.raises(grpc.RpcError) as failed:
            stubs.read(wrong, hint=False)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND


def test_streaming_message_appears_once_completed_and_tokens_survive_new_rows(
    stubs: Stubs, sample: Sample
) -> None:
    first, end = stubs.window(sample.session, page_size=2, inline_limit_bytes=LIMIT)
    token = end.next_page_token
    assert token and sample.streaming not in [e.uuid for e in first]
    db = sample.db
    data = db.assistant_data(sample.messages[-1])
    db.part(sample.session, sample.streaming, {"type": "step-finish", "reason": "stop"})
    db.update_message(sample.streaming, data)
    newer = db.user(sample.session, "and another", png_bytes(10_000, seed=5))
    rest, _ = stubs.window(sample.session, page_size=100, page_token=token)
    rows = _message_rows(sample, sample.session)
    assert [e.uuid for e in rest + first] == [mid for mid, _ in rows[:5]]
    latest, _ = stubs.window(sample.session, page_size=2, inline_limit_bytes=LIMIT)
    assert [e.uuid for e in latest] == [sample.streaming, newer]
    ref = latest[1].media_refs[0]
    assert stubs.read(ref)[1] == db.images[newer][0]


def test_a_database_mid_migration_is_unavailable(
    tmp_path: Path, pair: ServerPair, stubs: Stubs, sample: Sample
) -> None:
    conn = sample.db.conn
    conn.execute("ALTER TABLE part RENAME TO __backup_part")
    with pytest.raises(grpc.RpcError) as failed:
        stubs.window(sample.child)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert_reason(failed.value, Reason.TRANSCRIPTS_UNAVAILABLE)
    assert str(tmp_path) not in (failed.value.details() or "")
    conn.execute("ALTER TABLE __backup_part RENAME TO part")
    entries, _ = stubs.window(sample.child)
    assert len(entries) == 2


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# Written in a child process, so this process's peak memory stays that of the servers.
_WRITE_BIG = """
import hashlib, sys
from pathlib import Path
from tests.support.history import bytes_read
from tests.support.media import png_bytes
from tests.support.opencode import OpencodeDb
db = OpencodeDb(Path(sys.argv[1]))
session = db.session("a huge attachment")
image = png_bytes(75 * 1024 * 1024, seed=11)
mid = db.user(session, "look", image)
db.assistant(session, mid, "seen")
db.close()
print(session, len(image), hashlib.sha256(image).hexdigest())
"""


def test_a_100_mb_part_is_read_without_loading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    written = subprocess.run(
        [sys.executable, "-c", _WRITE_BIG, str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    session, length, sha256 = written.stdout.split()
    pair = ServerPair(tmp_path / "root", tmp_path / "state", opencode=path)
    try:
        pair.start_history(0)
        pair.start_media(0)
        stubs = Stubs(pair)
        entries, _ = stubs.window(
            session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
        )
        ref = entries[0].media_refs[0]
        before = _peak_rss()
        size = 0
        digest = hashlib.sha256()
        for message in stubs.media.ReadMedia(
            media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(media_ref=ref)), timeout=120
        ):
            if message.WhichOneof("item") == "data":
                size += len(message.data)
                digest.update(message.data)
        grown = _peak_rss() - before
        stubs.close()
    finally:
        pair.close()
    assert size == int(length) and digest.hexdigest() == sha256
    # The servers run in this process: serving the part never held its 100 MB of text.
    assert grown < 64 * 1024 * 1024, grown


def test_insight_counts_each_assistant_messages_tokens_once_by_model(
    stubs: Stubs, sample: Sample
) -> None:
    got = stubs.history.GetSession(
        pb.GetSessionRequest(session_id=sample.session), timeout=10
    ).session.insight
    assert {c.type: c.count for c in got.entry_counts} == {"opencode": 5}
    assert got.photo_count == 3
    # Two completed assistant messages of 1200 input and 340 output tokens each.
    assert (got.usage.input_tokens, got.usage.output_tokens) == (2400, 680)
    assert [m.model for m in got.models] == ["claude-sonnet-4"]
    assert got.first_time.seconds == 1_760_000_004


def _search(pair: ServerPair, query: str, session_id: str) -> list[Any]:
    with grpc.insecure_channel(pair.history_addr) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        request = search_pb2.SearchRequest(query=query, session_id=session_id)
        return [m.hit for m in stub.Search(request, timeout=10) if m.WhichOneof("item") == "hit"]


def test_search_finds_text_reasoning_and_tools_never_payloads(
    pair: ServerPair, sample: Sample
) -> None:
    words = ("screenshot", "handler", "login", "auth", "Summary")
    found: dict[str, list[Any]] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the indexer catches up in the background
        found = {word: _search(pair, word, sample.session) for word in words}
        if all(found.values()):
            break
        time.sleep(0.1)
    assert [(h.entry_uuid, h.role) for h in found["screenshot"]] == [(sample.photo_message, "user")]
    assert found["screenshot"][0].has_photos
    assert {h.entry_uuid for h in found["handler"]} == {sample.tool_message}  # reasoning, text
    assert sample.tool_message in {h.entry_uuid for h in found["login"]}  # the tool's output
    encoded = base64.b64encode(sample.db.images[sample.photo_message][0]).decode()
    assert _search(pair, encoded[200:240], sample.session) == []


def test_a_thumbnail_of_a_pasted_photo(stubs: Stubs, sample: Sample) -> None:
    db = sample.db
    picture = png(3)
    mid = db.user(sample.session, "a real photo", picture)
    db.assistant(sample.session, mid, "nice")
    entries, _ = stubs.window(sample.session, page_size=2, inline_limit_bytes=LIMIT)
    (ref,) = [r for e in entries for r in e.media_refs]
    assert stubs.read(ref)[1] == picture
    metadata = None
    for message in stubs.media.ReadMedia(
        media_pb2.ReadMediaRequest(
            media=media_pb2.MediaSelector(media_ref=ref), size=media_pb2.THUMBNAIL_SIZE_96
        ),
        timeout=30,
    ):
        if message.WhichOneof("item") == "metadata":
            metadata = message.metadata
    assert metadata is not None and max(metadata.width, metadata.height) <= 96


def test_watch_streams_messages_as_they_complete(stubs: Stubs, sample: Sample) -> None:
    db = sample.db
    call = stubs.history.WatchSession(pb.WatchSessionRequest(session_id=sample.session), timeout=30)
    entries: list[pb.Entry] = []
    heartbeats = 0
    try:
        for message in call:
            kind = message.WhichOneof("event")
            if kind == "heartbeat":
                heartbeats += 1
                if heartbeats == 1:
                    db.update_message(sample.streaming, db.assistant_data(sample.messages[-1]))
                elif heartbeats == 2:
                    db.user(sample.session, "a later prompt")
            elif kind == "entry":
                entries.append(message.entry)
                if len(entries) == 2:
                    break
    finally:
        call.cancel()
    assert entries[0].uuid == sample.streaming
    assert orjson.loads(entries[1].json)["payload"]["parts"][0]["data"]["text"] == "a later prompt"


def test_a_locked_database_is_unavailable_then_read_again(tmp_path: Path) -> None:
    # A database in rollback-journal mode (as during a migration that leaves WAL) whose
    # writer keeps its exclusive lock past the readers' busy timeout.
    sample = write_sample(tmp_path / "locked.db")
    sample.db.conn.execute("PRAGMA journal_mode = DELETE")
    sample.db.close()
    pair = ServerPair(tmp_path / "root", tmp_path / "state", opencode=sample.db.path)
    writer = sqlite3.connect(sample.db.path, isolation_level=None)
    try:
        pair.start_history(0)
        pair.start_media(0)
        stubs = Stubs(pair)
        assert len(stubs.window(sample.other)[0]) == 1
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("UPDATE session SET title = title")
        with pytest.raises(grpc.RpcError) as failed:
            stubs.window(sample.child)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert_reason(failed.value, Reason.TRANSCRIPTS_UNAVAILABLE)
        assert "locked.db" not in (failed.value.details() or "")
        writer.execute("COMMIT")
        assert len(stubs.window(sample.child)[0]) == 2
        stubs.close()
    finally:
        writer.close()
        pair.close()


def test_get_session_links_the_sub_session(stubs: Stubs, sample: Sample) -> None:
    got = stubs.history.GetSession(pb.GetSessionRequest(session_id=sample.session), timeout=10)
    assert got.session.subagent_count == 1
    child = stubs.history.GetSession(pb.GetSessionRequest(session_id=sample.child), timeout=10)
    assert child.session.parent_session_id == sample.session


def _slim(stubs: Stubs, **request: Any) -> tuple[pb.SlimHeader, list[tuple[pb.SlimFile, bytes]]]:
    header = pb.SlimHeader()
    files: list[tuple[pb.SlimFile, bytes]] = []
    for message in stubs.history.SlimSession(pb.SlimSessionRequest(**request), timeout=30):
        kind = message.WhichOneof("item")
        if kind == "header":
            header = message.header
        elif kind == "file":
            files.append((message.file, b""))
        elif kind == "data":
            files[-1] = (files[-1][0], files[-1][1] + message.data)
    return header, files


def test_slim_is_opencodes_export_format_with_each_image_a_text_part_naming_its_ref(
    stubs: Stubs, sample: Sample
) -> None:
    entries, _ = stubs.window(
        sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
    )
    refs = {r.entry_uuid: [] for _, r in _refs(entries)}  # part id -> its refs
    for _, ref in _refs(entries):
        refs[ref.entry_uuid].append(ref)
    header, files = _slim(stubs, session_id=sample.session, include_subagents=True)
    assert header.source == "opencode" and header.session_id == sample.session
    tag = header.copy_session_id.removeprefix(sample.session)
    assert len(tag) == 8 and header.copy_session_id != sample.session
    (top, data), (sub, child_data) = files
    assert top.relative_path == f"{header.copy_session_id}.json"
    assert sub.relative_path == f"{header.copy_session_id}/subagents/{sample.child}{tag}.json"
    assert b";base64," not in data
    copy = orjson.loads(data)
    # opencode's export: the session's info, then each message's info and parts, every id
    # tagged so that `opencode import` adds it beside the original.
    info = copy["info"]
    assert (info["id"], info["title"], info["directory"]) == (
        header.copy_session_id,
        "Fix the login page",
        DIRECTORY,
    )
    assert {"slug", "projectID", "version", "time"} <= set(info)
    assert [m["info"]["id"] for m in copy["messages"]] == [mid + tag for mid in sample.messages]
    assert orjson.loads(child_data)["info"]["parentID"] == header.copy_session_id
    rows = dict(_message_rows(sample, sample.session))
    by_id = {m["info"]["id"]: m for m in copy["messages"]}
    for mid in sample.messages:
        message = by_id[mid + tag]
        stored = orjson.loads(rows[mid])
        assert message["info"] == {
            "id": mid + tag,
            "sessionID": header.copy_session_id,
            **stored,
            **({"parentID": stored["parentID"] + tag} if "parentID" in stored else {}),
        }
        for part in message["parts"]:
            assert part["sessionID"] == header.copy_session_id
            assert part["messageID"] == mid + tag and part["id"].startswith("prt_")
    # The pasted image's file part is now a text part naming it, its ref and sha256.
    photo_parts = by_id[sample.photo_message + tag]["parts"]
    photo_part = next(
        pid for pid in refs if pid in {p["id"].removesuffix(tag) for p in photo_parts}
    )
    note = next(p for p in photo_parts if p["id"] == photo_part + tag)
    (ref,) = refs[photo_part]
    image = sample.db.part_images[photo_part][0]
    assert note["type"] == "text" and "[image paste-0.png cut by scrollback slim" in note["text"]
    assert f"ref {ref.uri} pin {ref.pin}" in note["text"]
    assert hashlib.sha256(image).hexdigest() in note["text"]
    # The tool part keeps its call and output; its image attachments are named by the text
    # part that follows it.
    tool_parts = by_id[sample.tool_message + tag]["parts"]
    at = next(k for k, p in enumerate(tool_parts) if p.get("type") == "tool")
    tool, notes = tool_parts[at], tool_parts[at + 1]
    assert tool["state"]["output"] == "export function login() {}"
    assert tool["state"]["attachments"] == []
    assert notes["id"] == tool["id"] + "n" and notes["type"] == "text"
    for ref in refs[tool["id"].removesuffix(tag)]:
        assert f"ref {ref.uri} pin {ref.pin}" in notes["text"]
    # The same session and fork give the same copy id; a fork another.
    again, _ = _slim(stubs, session_id=sample.session)
    forked, _ = _slim(stubs, session_id=sample.session, fork_session_id="fork1")
    assert again.copy_session_id == header.copy_session_id != forked.copy_session_id
    # Downscale and keep_last keep Claude Code's blocks: not for an opencode copy.
    for options in ({"images": pb.SLIM_IMAGES_DOWNSCALE}, {"keep_last": 1}):
        with pytest.raises(grpc.RpcError) as failed:
            _slim(stubs, session_id=sample.session, **options)
        assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_slim_install_writes_the_export_file_and_prints_opencodes_import_command(
    pair: ServerPair,
    sample: Sample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    before = sample.db.path.read_bytes()
    addrs = ["--history-addr", pair.history_addr, "--media-addr", pair.media_addr]
    assert main(["slim", *addrs, sample.session, "--install"]) == 0
    printed = capsys.readouterr().out
    (written,) = here.glob("*.json")
    copy = orjson.loads(written.read_bytes())
    assert written.name == copy["info"]["id"] + ".json"
    assert f"opencode import {written}" in printed
    assert f"opencode --session {copy['info']['id']}" in printed
    assert "claude --resume" not in printed
    # opencode's database is not written.
    assert sample.db.path.read_bytes() == before
    assert sample.db.conn.execute("SELECT count(*) FROM session").fetchone()[0] == 3


def test_a_part_rewritten_before_a_tokens_boundary_refuses_the_token(
    stubs: Stubs, sample: Sample
) -> None:
    first, end = stubs.window(sample.session, page_size=2)
    # An earlier part grows in place (as opencode marks a tool output compacted): every later
    # byte moves, so the token's boundary no longer starts a line.
    part = sample.db.conn.execute(
        "SELECT id FROM part WHERE message_id = ? AND data LIKE '%reasoning%'",
        (sample.tool_message,),
    ).fetchone()[0]
    longer = {"type": "reasoning", "text": "The button handler, at length " * 20, "time": {}}
    sample.db.update_part(part, longer)
    with pytest.raises(grpc.RpcError) as failed:
        stubs.window(sample.session, page_size=100, page_token=end.next_page_token)
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert_reason(failed.value, Reason.TRANSCRIPT_REWRITTEN)
    # A new first page serves the rewritten bytes.
    again, _ = stubs.window(sample.session, page_size=100)
    assert [e.uuid for e in again][-2:] == [e.uuid for e in first]
    assert "at length" in again[1].json


def _listed(stubs: Stubs, session_id: str, **request: Any) -> list[pb.ImageInfo]:
    return [
        m.image
        for m in stubs.history.ListImages(
            pb.ListImagesRequest(session_id=session_id, **request), timeout=30
        )
        if m.HasField("image")
    ]


def test_list_images_lists_every_file_part_and_attachment_with_the_windows_refs(
    stubs: Stubs, sample: Sample
) -> None:
    db = sample.db
    small = png(3, 10)  # a real 10x10 PNG, inline in every window: listed without a ref
    small_part = db.part(sample.session, sample.tool_message, file_part(small, "tiny.png"), small)
    real = png(4, 100)  # a real 100x100 PNG, cut
    real_part = db.part(sample.session, sample.tool_message, file_part(real, "real.png"), real)
    entries, _ = stubs.window(
        sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
    )
    minted = [r for _, r in _refs(entries)]
    listed = _listed(stubs, sample.session, include_subagents=True)
    with_ref = [i for i in listed if i.HasField("ref")]
    assert [(i.ref.uri, i.ref.pin, i.ref.line_offset_hint) for i in with_ref] == [
        (r.uri, r.pin, r.line_offset_hint) for r in minted
    ]
    line_of = {e.uuid: n for n, e in enumerate(entries, 1)}
    for info in with_ref:
        want = db.part_images[info.ref.entry_uuid][info.ref.index]
        assert info.index == info.ref.index and info.kind == "image"
        assert info.entry_uuid in (sample.photo_message, sample.tool_message)
        assert info.line_number == line_of[info.entry_uuid]
        assert (info.size_bytes, info.sha256) == (len(want), hashlib.sha256(want).hexdigest())
        assert info.declared_media_type == "image/png" and not info.api_path
        if info.ref.entry_uuid == real_part:
            assert (info.media_type, info.width, info.height) == ("image/png", 100, 100)
            assert not list(info.problems)
        else:  # the sample's images sniff as PNG but have no PNG header to read
            assert (info.media_type, info.width, list(info.problems)) == ("", 0, ["undecodable"])
        # The listed ref is the one ReadMedia serves.
        assert stubs.read(info.ref, hint=False)[1] == want
    inline = [i for i in listed if not i.HasField("ref")]
    assert [(i.entry_uuid, i.sha256, i.width) for i in inline] == [
        (sample.tool_message, hashlib.sha256(small).hexdigest(), 10)
    ]
    assert real_part in {i.ref.entry_uuid for i in with_ref}
    assert db.part_images[small_part] == [small]
    # A session without images lists none; the sub-session has none either.
    assert _listed(stubs, sample.other) == []


def test_windows_find_a_views_lines_by_its_messages(stubs: Stubs, sample: Sample) -> None:
    """A view knows where each message's line is: windows of both directions and their
    page tokens find lines by it, and the same window again reads the lines' marks only."""
    rows = [mid for mid, _ in _message_rows(sample, sample.session)][:-1]
    seen: list[str] = []
    token = ""
    while True:
        page, end = stubs.window(sample.session, page_size=2, page_token=token)
        seen[:0] = [e.uuid for e in page]
        token = end.next_page_token
        if not token:
            break
    assert seen == rows
    forward, _ = stubs.window(sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST)
    assert [e.uuid for e in forward] == rows
    # The lines of the latest window hold the session's images (75 KB of data URLs): served
    # again, the entries the first window served answer, their marks checked.
    latest, _ = stubs.window(sample.session, page_size=200)
    size = sum(len(e.json) for e in latest) + 100_000
    before = bytes_read()
    again, _ = stubs.window(sample.session, page_size=200)
    assert [e.uuid for e in again] == [e.uuid for e in latest]
    assert bytes_read() - before < size // 4
