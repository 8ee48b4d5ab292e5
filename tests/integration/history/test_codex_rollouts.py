"""Codex CLI rollouts as a second source, through both real servers (docs/contract.md §1, §3, §4).

Generated rollouts (tests/support/codex.py) under a Codex sessions dir and its
archive: listed beside a Claude Code session with their source, project (cwd)
and id (the uuid of the file name); every window complete with the data-URL
payloads cut; every image ref (named by its line's offset) byte-exact through
ReadMedia with and without its hint, still valid after appends, and
FAILED_PRECONDITION after a rewrite; a torn line skipped and counted, an
unknown kind served untouched.
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from scrollback.contract.marker import STRIPPED_MEDIA_MARKER
from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from tests.support.codex import (
    CWD,
    SECRET_WORD,
    Rollout,
    data_url,
    full_rollout,
    usage,
    write_rollout,
)
from tests.support.media import png_bytes
from tests.support.reasons import assert_reason
from tests.support.servers import ServerPair, png, user_line


@pytest.fixture
def codex_pair(tmp_path: Path) -> Iterator[ServerPair]:
    pair = ServerPair(tmp_path / "root", tmp_path / "state", codex=tmp_path / "codex" / "sessions")
    try:
        pair.start_history(0)
        pair.start_media(0)
        yield pair
    finally:
        pair.close()


class Stubs:
    def __init__(self, pair: ServerPair) -> None:
        self._channels = [
            grpc.insecure_channel(pair.history_addr),
            grpc.insecure_channel(pair.media_addr),
        ]
        self.history = history_pb2_grpc.HistoryServiceStub(self._channels[0])
        self.media = media_pb2_grpc.MediaServiceStub(self._channels[1])

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def sessions(self) -> dict[str, pb.Session]:
        listed = self.history.ListSessions(pb.ListSessionsRequest(page_size=1000), timeout=10)
        return {s.session_id: s for s in listed.sessions}

    def window(self, session_id: str, **request: Any) -> tuple[list[pb.Entry], pb.WindowEnd]:
        entries: list[pb.Entry] = []
        end: pb.WindowEnd | None = None
        for message in self.history.ReadWindow(
            pb.ReadWindowRequest(session_id=session_id, page_size=200, **request), timeout=10
        ):
            kind = message.WhichOneof("item")
            if kind == "entry":
                entries.append(message.entry)
            elif kind == "entries":
                entries.extend(message.entries.entries)
            elif kind == "end":
                end = message.end
        assert end is not None
        return entries, end

    def read(self, ref: ref_pb2.MediaRef, *, hint: bool = True) -> tuple[Any, bytes]:
        selector = ref_pb2.MediaRef()
        selector.CopyFrom(ref)
        if not hint:
            selector.ClearField("line_offset_hint")
        metadata = None
        chunks: list[bytes] = []
        for message in self.media.ReadMedia(
            media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(media_ref=selector)),
            timeout=10,
        ):
            if message.WhichOneof("item") == "metadata":
                metadata = message.metadata
            else:
                chunks.append(message.data)
        return metadata, b"".join(chunks)


@pytest.fixture
def stubs(codex_pair: ServerPair) -> Iterator[Stubs]:
    made = Stubs(codex_pair)
    try:
        yield made
    finally:
        made.close()


def _codex_dir(pair: ServerPair) -> Path:
    assert isinstance(pair.codex, Path)
    return pair.codex


def _expected_by_offset(rollout: Rollout) -> dict[int, list[bytes]]:
    offsets: dict[int, list[bytes]] = {}
    position = 0
    for line, images in zip(rollout.lines, rollout.images, strict=True):
        if images:
            offsets[position] = images
        position += len(line) + 1
    return offsets


def test_rollouts_listed_beside_claude_code_with_source_project_and_id(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    codex_pair.transcript("claude1").write_bytes(user_line("u1", "hello"))
    live, archived, bare = (str(uuid.uuid4()) for _ in range(3))
    write_rollout(_codex_dir(codex_pair), full_rollout(live))
    old = Rollout(archived)
    old.meta(cwd="/srv/elsewhere")
    old.user("an archived question", [])
    write_rollout(_codex_dir(codex_pair), old, archived=True)
    pictured_id = str(uuid.uuid4())
    pictured = Rollout(pictured_id)  # its first prompt carries a screenshot
    pictured.meta()
    pictured.user("why is this egret blurry", [png_bytes(60_000, seed=4)])
    write_rollout(_codex_dir(codex_pair), pictured)
    headless = Rollout(bare)  # no session_meta: listed by its file name
    headless.assistant("no meta here")
    write_rollout(_codex_dir(codex_pair), headless)

    sessions = stubs.sessions()
    assert sessions["claude1"].source == "claude-code"
    assert sessions[live].source == "codex"
    assert sessions[live].project_dir == CWD
    assert sessions[live].title == "fix the flamingo layout"
    assert sessions[archived].source == "codex"
    assert sessions[archived].project_dir == "/srv/elsewhere"
    assert sessions[archived].title == "an archived question"
    assert sessions[bare].source == "codex" and sessions[bare].project_dir == ""
    assert sessions[pictured_id].title == "why is this egret blurry"
    only = stubs.history.ListSessions(pb.ListSessionsRequest(project_dir=CWD), timeout=10)
    assert {s.session_id for s in only.sessions} == {live, pictured_id}


def test_every_image_of_a_rollout_gets_a_ref_that_resolves_byte_exact(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    session = str(uuid.uuid4())
    rollout = full_rollout(session)
    path = write_rollout(_codex_dir(codex_pair), rollout)
    entries, end = stubs.window(session)

    assert end.skipped_lines == 1  # the torn line
    assert len(entries) == len(rollout.lines) - 1
    unknown = [e for e in entries if e.type == "x_future_kind"]
    assert len(unknown) == 1 and orjson.loads(unknown[0].json) == orjson.loads(rollout.lines[13])
    for entry in entries:
        assert ";base64,iVBOR" not in entry.json  # no image payload is ever served

    expected = _expected_by_offset(rollout)
    refs = [(e.byte_offset, r) for e in entries for r in e.media_refs]
    # three places: the user message and its event_msg copy, the tool output, the compaction
    assert sorted({offset for offset, _ in refs}) == sorted(expected)
    assert len(refs) == sum(len(images) for images in expected.values()) == 6
    for offset, ref in refs:
        assert ref.entry_uuid == f"at-{offset}"
        assert ref.uri == f"{session}/at-{offset}/{ref.index}"
        assert ref.declared_media_type == "image/png"
        want = expected[offset][ref.index]
        for hint in (True, False):
            metadata, data = stubs.read(ref, hint=hint)
            assert data == want
            assert metadata.sha256 == hashlib.sha256(want).hexdigest()
            assert metadata.content_type == "image/png"
            assert metadata.declared_media_type == "image/png"

    # The file grows: every ref still resolves, the new line's too.
    more = png_bytes(33_000, seed=9)
    rollout.user("one more heron", [more])
    path.write_bytes(rollout.text())
    grown, _ = stubs.window(session)
    for offset, ref in refs:
        assert stubs.read(ref, hint=False)[1] == expected[offset][ref.index]
    newest = [r for e in grown[-2:] for r in e.media_refs]
    assert [stubs.read(r)[1] for r in newest] == [more, more]

    # A rewrite (the same lines, one byte shorter near the start): FAILED_PRECONDITION.
    path.write_bytes(rollout.text().replace(b"You are Codex. ", b"You are Codex.", 1))
    for _, ref in refs:
        with pytest.raises(grpc.RpcError) as failed:
            stubs.read(ref)
        assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert_reason(failed.value, Reason.PIN_MISMATCH)


def test_offset_refs_that_name_nothing_are_not_found(codex_pair: ServerPair, stubs: Stubs) -> None:
    session = str(uuid.uuid4())
    rollout = full_rollout(session)
    write_rollout(_codex_dir(codex_pair), rollout)
    entries, _ = stubs.window(session)
    ref = next(r for e in entries for r in e.media_refs)
    for entry_uuid, index in (("at-99999999", 0), (ref.entry_uuid, 7)):
        wrong = ref_pb2.MediaRef(
            session_id=session, entry_uuid=entry_uuid, index=index, pin=ref.pin
        )
        with pytest.raises(grpc.RpcError) as failed:
            stubs.read(wrong)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    # An offset inside a line: no line starts there, as after a rewrite.
    inside = ref_pb2.MediaRef(
        session_id=session, entry_uuid=f"at-{ref.line_offset_hint + 3}", index=0, pin=ref.pin
    )
    with pytest.raises(grpc.RpcError) as failed:
        stubs.read(inside)
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_data_url_in_a_claude_code_transcript_is_cut_without_a_ref(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    picture = png(3)
    url = data_url(picture)
    line = orjson.dumps(
        {
            "type": "user",
            "uuid": "u-mcp",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": url}],
                    }
                ],
            },
        }
    )
    codex_pair.transcript("claude-mcp").write_bytes(line + b"\n")
    entries, _ = stubs.window("claude-mcp")
    text = orjson.loads(entries[0].json)["message"]["content"][0]["content"][0]["text"]
    assert text == "data:image/png;base64," + STRIPPED_MEDIA_MARKER
    assert list(entries[0].media_refs) == []
    # INLINE mode serves the line whole.
    whole, _ = stubs.window("claude-mcp", media_mode=pb.MEDIA_MODE_INLINE)
    assert orjson.loads(whole[0].json) == orjson.loads(line)
    assert base64.b64decode(url.split(",", 1)[1]) == picture


def test_insight_counts_a_rollouts_cumulative_usage_once_per_model(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    session = str(uuid.uuid4())
    rollout = full_rollout(session)
    path = write_rollout(_codex_dir(codex_pair), rollout)
    insight = stubs.history.GetSession(pb.GetSessionRequest(session_id=session), timeout=10)
    got = insight.session.insight
    counts = {c.type: c.count for c in got.entry_counts}
    assert counts == {
        "session_meta": 1,
        "turn_context": 2,
        "response_item": 6,
        "event_msg": 5,
        "x_future_kind": 1,
        "compacted": 1,
    }
    assert got.photo_count == 3  # the response items' images; copies are not counted again
    # The last cumulative total, split by model: gpt-5 up to its count, o3 the growth after.
    assert (got.usage.input_tokens, got.usage.cache_read_input_tokens) == (1600, 1400)
    assert (got.usage.output_tokens, got.usage.cache_creation_input_tokens) == (700, 0)
    models = {m.model: m for m in got.models}
    assert set(models) == {"gpt-5", "o3"}
    five, o3 = models["gpt-5"].usage, models["o3"].usage
    assert (five.input_tokens, five.cache_read_input_tokens, five.output_tokens) == (600, 400, 200)
    assert (o3.input_tokens, o3.cache_read_input_tokens, o3.output_tokens) == (1000, 1000, 500)
    assert got.cost_complete
    assert got.cost_usd == pytest.approx(0.0028 + 0.0065)

    # Appends are counted incrementally: a repeated count, then a new one.
    rollout.token_count(usage(3000, 1400, 700, 150), usage(1, 1, 1, 1))
    rollout.token_count(usage(3500, 1500, 800, 150), usage(500, 100, 100, 0))
    path.write_bytes(rollout.text())
    again = stubs.history.GetSession(pb.GetSessionRequest(session_id=session), timeout=10)
    grown = again.session.insight
    assert (grown.usage.input_tokens, grown.usage.cache_read_input_tokens) == (2000, 1500)
    assert grown.usage.output_tokens == 800
    assert {m.model: m.usage.output_tokens for m in grown.models} == {"gpt-5": 200, "o3": 600}

    # An unknown model: its tokens count, the cost is incomplete.
    other = Rollout(str(uuid.uuid4()))
    other.meta()
    other.turn_context("some-future-model")
    other.token_count(usage(10, 0, 5, 0), usage(10, 0, 5, 0))
    write_rollout(_codex_dir(codex_pair), other)
    priced = stubs.history.GetSession(pb.GetSessionRequest(session_id=other.session_id), timeout=10)
    assert priced.session.insight.usage.output_tokens == 5
    assert not priced.session.insight.cost_complete


def test_insight_sums_the_segments_of_a_rollout_whose_totals_restart(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    # A resumed rollout: the cumulative count starts over, then climbs back to a total the
    # first segment also reached; each segment's last total counts.
    rollout = Rollout(str(uuid.uuid4()))
    rollout.meta()
    rollout.turn_context("gpt-5")
    rollout.token_count(usage(100, 40, 50, 0), usage(100, 40, 50, 0))
    rollout.token_count(usage(10, 0, 5, 0), usage(10, 0, 5, 0))
    rollout.token_count(usage(100, 40, 50, 0), usage(90, 40, 45, 0))
    write_rollout(_codex_dir(codex_pair), rollout)
    request = pb.GetSessionRequest(session_id=rollout.session_id)
    got = stubs.history.GetSession(request, timeout=10).session.insight.usage
    assert (got.input_tokens, got.cache_read_input_tokens, got.output_tokens) == (120, 80, 100)


def _search(pair: ServerPair, query: str, session_id: str) -> list[Any]:
    with grpc.insecure_channel(pair.history_addr) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        request = search_pb2.SearchRequest(query=query, session_id=session_id)
        return [m.hit for m in stub.Search(request, timeout=10) if m.WhichOneof("item") == "hit"]


def test_search_finds_rollout_text_and_never_encrypted_content_or_base64(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    session = str(uuid.uuid4())
    rollout = full_rollout(session)
    write_rollout(_codex_dir(codex_pair), rollout)
    offsets = _expected_by_offset(rollout)
    found: dict[str, list[Any]] = {}
    deadline = time.monotonic() + 20
    words = ("flamingo", "pelican", "heron", "albatross", "view_image", "bygone")
    while time.monotonic() < deadline:  # the indexer catches up in the background
        found = {word: _search(codex_pair, word, session) for word in words}
        if all(found[word] for word in words[:5]):
            break
        time.sleep(0.1)
    flamingo = found["flamingo"]
    # The user message (twice: plain and with images), never its event_msg copy.
    assert {(hit.type, hit.role) for hit in flamingo} == {("response_item", "user")}
    assert len(flamingo) == 2
    assert any(hit.has_photos for hit in flamingo)
    assert [hit.type for hit in found["pelican"]] == ["response_item"]  # a reasoning summary
    assert len(found["heron"]) == 1  # the tool output's text
    assert found["albatross"][0].role == "assistant"
    assert len(found["view_image"]) == 1  # the call's arguments
    assert found["bygone"] == []  # the replacement history is not indexed again
    # Hits open windows at their entries, and name them by offset.
    assert all(hit.entry_uuid == "" for hit in flamingo)
    assert offsets  # the rollout has images; none of their base64 is searchable
    encoded = base64.b64encode(png_bytes(40_000, seed=1)).decode()
    for probe in (SECRET_WORD, encoded[100:140], "gAAAAAB"):
        assert _search(codex_pair, probe, session) == []


def test_watch_streams_a_growing_rollout_and_holds_a_half_written_line(
    codex_pair: ServerPair, stubs: Stubs
) -> None:
    session = str(uuid.uuid4())
    rollout = Rollout(session)
    rollout.meta()
    path = write_rollout(_codex_dir(codex_pair), rollout)
    start = path.stat().st_size
    picture = png_bytes(36_000, seed=5)
    rollout.user("watch the egret", [picture])
    added = rollout.text()[start:]
    first_end = added.index(b"\n") + 1
    half = first_end + (len(added) - first_end) // 2

    call = stubs.history.WatchSession(pb.WatchSessionRequest(session_id=session), timeout=30)
    entries: list[pb.Entry] = []
    heartbeats = 0
    try:
        for message in call:
            kind = message.WhichOneof("event")
            if kind == "heartbeat":
                heartbeats += 1
                with path.open("ab") as handle:
                    if heartbeats == 1:
                        handle.write(added[:half])  # a whole line, then half of the next
                    elif heartbeats == 3:
                        assert len(entries) == 1  # the half line was held back
                        handle.write(added[half:])
            elif kind == "entry":
                entries.append(message.entry)
                if len(entries) == 2:
                    break
    finally:
        call.cancel()
    assert [e.type for e in entries] == ["response_item", "event_msg"]
    for entry in entries:
        (ref,) = entry.media_refs
        assert ref.entry_uuid == f"at-{entry.byte_offset}"
        assert stubs.read(ref, hint=False)[1] == picture
