"""Gemini CLI sessions as a source, through both real servers (docs/contract.md §1, §2, §4).

Sessions written as gemini-cli writes them (tests/support/gemini.py) under a
Gemini home: listed with source "gemini", the project of `.project_root`, the
summary as title and sub-agent links; a window serves each live message once,
its latest version, with `inlineData` payloads cut; refs
`<session>/<message id>/<index>` resolve byte-exact with and without their
hint; pages go both ways with tokens that survive appends, and a rewind makes
an old token TRANSCRIPT_REWRITTEN.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from tests.support.gemini import (
    PROJECT_ROOT,
    GeminiSession,
    checkpointed_session,
    full_session,
    images_of,
    inline_part,
    legacy_document,
    write_session,
)
from tests.support.media import png_bytes
from tests.support.reasons import assert_reason
from tests.support.servers import ServerPair, png, user_line

SESSION = "7d3f6a52-1c2b-4e8f-9a0d-3b5c7e9f1a24"


@pytest.fixture
def gemini_pair(tmp_path: Path) -> Iterator[ServerPair]:
    pair = ServerPair(tmp_path / "root", tmp_path / "state", gemini=tmp_path / "gemini")
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
        request.setdefault("page_size", 200)
        entries: list[pb.Entry] = []
        end: pb.WindowEnd | None = None
        for message in self.history.ReadWindow(
            pb.ReadWindowRequest(session_id=session_id, **request), timeout=10
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

    def read(self, ref: ref_pb2.MediaRef, *, hint: bool = True, size: int = 0) -> tuple[Any, bytes]:
        selector = ref_pb2.MediaRef()
        selector.CopyFrom(ref)
        if not hint:
            selector.ClearField("line_offset_hint")
        metadata = None
        chunks: list[bytes] = []
        request = media_pb2.ReadMediaRequest(
            media=media_pb2.MediaSelector(media_ref=selector), size=size
        )
        for message in self.media.ReadMedia(request, timeout=10):
            if message.WhichOneof("item") == "metadata":
                metadata = message.metadata
            else:
                chunks.append(message.data)
        return metadata, b"".join(chunks)


@pytest.fixture
def stubs(gemini_pair: ServerPair) -> Iterator[Stubs]:
    made = Stubs(gemini_pair)
    try:
        yield made
    finally:
        made.close()


def _home(pair: ServerPair) -> Path:
    assert pair.gemini is not None
    return pair.gemini


def test_sessions_listed_with_source_project_title_and_subagent_links(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    gemini_pair.transcript("claude1").write_bytes(user_line("u1", "hello"))
    write_session(_home(gemini_pair), full_session(SESSION))
    child_id = "c0ffee00-1111-4222-8333-444455556666"
    child = GeminiSession(child_id, kind="subagent")
    child.user("cu1", "look into the chart")
    write_session(_home(gemini_pair), child, parent=SESSION)
    plain_id = "aa11bb22-0000-4000-8000-000000000009"
    plain = GeminiSession(plain_id)
    plain.user("p1", [{"text": "  why is the   build red? "}, inline_part(png_bytes(9000))])
    write_session(_home(gemini_pair), plain, slug="other-app", project_root=None)

    sessions = stubs.sessions()
    assert sessions["claude1"].source == "claude-code"
    main = sessions[SESSION]
    assert (main.source, main.project_dir, main.title) == (
        "gemini",
        PROJECT_ROOT,
        "Cat photo and a chart",
    )
    assert not main.is_subagent
    sub = sessions[child_id]
    assert sub.is_subagent and sub.parent_session_id == SESSION and sub.source == "gemini"
    assert sessions[plain_id].project_dir == "other-app"
    assert sessions[plain_id].title == "why is the build red?"
    entries, _ = stubs.window(f"gemini:{SESSION}")
    assert entries


def test_a_window_serves_each_live_message_once_with_payloads_cut(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    for session_id, session in (
        (SESSION, full_session(SESSION)),
        ("5a5a5a5a-0000-4000-8000-00000000000c", checkpointed_session("5a5a5a5a-c", seed=2)),
    ):
        write_session(_home(gemini_pair), session, torn=b'{"id":"late","type":"us')
        if session_id != SESSION:
            session_id = "5a5a5a5a-c"
        entries, end = stubs.window(session_id)
        assert [e.uuid for e in entries] == list(session.messages)
        assert end.skipped_lines == 0
        for entry, message in zip(entries, session.messages.values(), strict=True):
            served = orjson.loads(entry.json)
            assert served["id"] == message["id"] and served["type"] == message["type"]
            assert "iVBOR" not in entry.json  # no image payload is ever served
            assert len(entry.media_refs) == len(images_of(message))


def test_every_image_ref_resolves_byte_exact_with_and_without_its_hint(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = full_session(SESSION, seed=5)
    write_session(_home(gemini_pair), session)
    entries, _ = stubs.window(SESSION)
    refs = [(e.uuid, r) for e in entries for r in e.media_refs]
    assert [(u, r.index) for u, r in refs] == [("u1", 0), ("g2", 0), ("g2", 1)]
    for message_id, ref in refs:
        assert ref.uri == f"{SESSION}/{message_id}/{ref.index}"
        want = images_of(session.messages[message_id])[ref.index]
        for hint in (True, False):
            metadata, data = stubs.read(ref, hint=hint)
            assert data == want
            assert metadata.sha256 == hashlib.sha256(want).hexdigest()
        stat = stubs.media.StatMedia(
            media_pb2.StatMediaRequest(media=[media_pb2.MediaSelector(media_ref=ref)]), timeout=10
        )
        assert stat.results[0].metadata.sha256 == hashlib.sha256(want).hexdigest()


def test_pages_both_ways_tokens_survive_appends_and_a_rewind_refuses_them(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = GeminiSession(SESSION)
    for k in range(6):
        session.user(f"u{k}", f"question {k}")
        session.gemini(f"g{k}", "")
        session.stream(f"g{k}", f"answer {k}")
    path = write_session(_home(gemini_pair), session)
    ids = list(session.messages)

    seen: list[str] = []
    token = ""
    while True:
        entries, end = stubs.window(SESSION, page_size=5, page_token=token)
        seen = [e.uuid for e in entries] + seen
        token = end.next_page_token
        if not token:
            break
        if len(seen) == 5:
            session.user("u9", "appended while paging")
            path.write_bytes(session.data())
    assert seen == ids

    forward: list[str] = []
    token = ""
    direction = pb.READ_DIRECTION_OLDEST_FIRST
    while True:
        entries, end = stubs.window(SESSION, page_size=4, page_token=token, direction=direction)
        forward += [e.uuid for e in entries]
        token = end.next_page_token
        if not token:
            break
    assert forward == list(session.messages)

    _, end = stubs.window(SESSION, page_size=3)
    session.rewind("u4")
    with path.open("ab") as handle:
        handle.write(session.lines[-1] + b"\n")
    with pytest.raises(grpc.RpcError) as refused:
        stubs.window(SESSION, page_size=3, page_token=end.next_page_token)
    assert_reason(refused.value, Reason.TRANSCRIPT_REWRITTEN)
    entries, _ = stubs.window(SESSION)
    assert [e.uuid for e in entries] == list(session.messages)


def test_insight_counts_each_message_once_per_model_and_never_a_rewound_one(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = full_session(SESSION)
    write_session(_home(gemini_pair), session)
    got = stubs.history.GetSession(pb.GetSessionRequest(session_id=SESSION), timeout=10)
    insight = got.session.insight
    assert {c.type: c.count for c in insight.entry_counts} == {"user": 3, "gemini": 2}
    assert insight.photo_count == 3
    # g1 (written four times) and g2 (three times) count once each; g3 was rewound.
    usage = insight.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (900 + 2000, 300)
    assert (usage.output_tokens, usage.cache_creation_input_tokens) == (40 + 25 + 80 + 10, 0)
    assert [m.model for m in insight.models] == ["gemini-2.5-pro"]


def _search(pair: ServerPair, query: str, session_id: str) -> list[Any]:
    with grpc.insecure_channel(pair.history_addr) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        request = search_pb2.SearchRequest(query=query, session_id=session_id)
        return [m.hit for m in stub.Search(request, timeout=10) if m.WhichOneof("item") == "hit"]


def test_search_finds_text_thoughts_and_tool_calls_never_payloads_or_rewound_text(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = full_session(SESSION, seed=8)
    write_session(_home(gemini_pair), session)
    words = ("photo", "Looking", "read_many_files", "question")
    found: dict[str, list[Any]] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the indexer catches up in the background
        found = {word: _search(gemini_pair, word, SESSION) for word in words}
        if all(found.values()):
            break
        time.sleep(0.1)
    assert {(h.entry_uuid, h.role) for h in found["photo"]} == {("u1", "user"), ("g1", "assistant")}
    assert [h.entry_uuid for h in found["Looking"]] == ["g1"]  # a thought's subject
    assert [h.entry_uuid for h in found["read_many_files"]] == ["g2"]  # a tool call's name
    assert [h.entry_uuid for h in found["question"]] == ["u4"]
    encoded = base64.b64encode(png_bytes(30_000, seed=9)).decode()
    for probe in ("Sure", "start over", encoded[200:240]):  # rewound text, a payload
        assert _search(gemini_pair, probe, SESSION) == []


def test_an_older_whole_document_session_is_served_read_only_with_its_refs(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = full_session(SESSION, seed=11)
    chats = _home(gemini_pair) / "tmp" / "old-app" / "chats"
    chats.mkdir(parents=True)
    name = "session-2025-06-01T10-00-7d3f6a52"
    (chats / f"{name}.json").write_bytes(legacy_document(session))
    listed = stubs.sessions()[name]
    assert (listed.source, listed.project_dir) == ("gemini", "old-app")
    assert listed.title == "what is in this photo?"
    entries, _ = stubs.window(name)
    assert [e.uuid for e in entries] == list(session.messages)
    refs = [(e.uuid, r) for e in entries for r in e.media_refs]
    assert [(u, r.index) for u, r in refs] == [("u1", 0), ("g2", 0), ("g2", 1)]
    for message_id, ref in refs:
        want = images_of(session.messages[message_id])[ref.index]
        for hint in (True, False):
            assert stubs.read(ref, hint=hint)[1] == want


def test_thumbnails_of_a_gemini_image(gemini_pair: ServerPair, stubs: Stubs) -> None:
    session = GeminiSession(SESSION)
    session.user("u1", [{"text": "a real picture"}, inline_part(png(3, size=300))])
    write_session(_home(gemini_pair), session)
    entries, _ = stubs.window(SESSION)
    ref = entries[0].media_refs[0]
    thumbnail, data = stubs.read(ref, size=media_pb2.THUMBNAIL_SIZE_96)
    assert data[:4] == b"RIFF" and thumbnail.width == 96 and thumbnail.height == 96


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_watch_streams_new_messages_and_each_new_version_of_a_streamed_one(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = GeminiSession(SESSION)
    session.user("u1", "hello")
    path = write_session(_home(gemini_pair), session)
    picture = png_bytes(36_000, seed=5)
    call = stubs.history.WatchSession(pb.WatchSessionRequest(session_id=SESSION), timeout=30)
    entries: list[pb.Entry] = []
    heartbeats = 0
    try:
        for message in call:
            kind = message.WhichOneof("event")
            if kind == "heartbeat":
                heartbeats += 1
                written = path.stat().st_size
                if heartbeats == 1:
                    session.user("u2", [{"text": "and this"}, inline_part(picture)])
                    session.gemini("g2", "")
                    _append(path, session.data()[written:])
                elif heartbeats == 3:
                    session.stream("g2", "A heron.")  # half of the new version first
                    _append(path, session.data()[written:-20])
                elif heartbeats == 5:
                    _append(path, session.data()[written:])
            elif kind == "entry":
                entries.append(message.entry)
                if len(entries) == 3:
                    break
    finally:
        call.cancel()
    assert [e.uuid for e in entries] == ["u2", "g2", "g2"]
    assert orjson.loads(entries[2].json)["content"] == "A heron."
    (ref,) = entries[0].media_refs
    assert stubs.read(ref, hint=False)[1] == picture


def test_list_images_lists_each_live_message_image_with_its_ref(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = full_session(SESSION, seed=2)
    session.user("u8", [{"text": "a real one"}, inline_part(png(4, size=64))])
    write_session(_home(gemini_pair), session)
    listed = [
        m.image
        for m in stubs.history.ListImages(pb.ListImagesRequest(session_id=SESSION), timeout=10)
        if m.WhichOneof("item") == "image"
    ]
    assert [(i.entry_uuid, i.index) for i in listed] == [
        ("u1", 0),
        ("g2", 0),
        ("g2", 1),
        ("u8", 0),
    ]
    entries, _ = stubs.window(SESSION)
    minted = {r.uri: r.pin for e in entries for r in e.media_refs}
    for image in listed:
        # The same ref and pin as the window's (a small image stays inline in a window).
        assert minted.get(image.ref.uri, image.ref.pin) == image.ref.pin
        want = images_of(session.messages[image.entry_uuid])[image.index]
        assert stubs.read(image.ref, hint=False)[1] == want
        assert image.sha256 == hashlib.sha256(want).hexdigest()
        assert image.size_bytes == len(want)
    assert (listed[-1].width, listed[-1].height) == (64, 64)
    assert list(listed[0].problems) == ["undecodable"]  # bytes that only sniff as PNG


def test_a_slim_copy_is_a_gemini_session_of_the_live_messages_with_images_as_notes(
    gemini_pair: ServerPair, stubs: Stubs
) -> None:
    session = full_session(SESSION, seed=6)
    write_session(_home(gemini_pair), session)
    fork = "f0f0f0f0-0000-4000-8000-000000000001"
    request = pb.SlimSessionRequest(session_id=SESSION, fork_session_id=fork)
    files: dict[str, bytearray] = {}
    current = ""
    for message in stubs.history.SlimSession(request, timeout=10):
        kind = message.WhichOneof("item")
        if kind == "file":
            current = message.file.relative_path
            files[current] = bytearray()
        elif kind == "data":
            files[current] += message.data
    assert list(files) == [f"session-{fork}.jsonl"]
    lines = [orjson.loads(line) for line in bytes(files[current]).splitlines()]
    header, messages = lines[0], lines[1:]
    assert header["sessionId"] == fork and header["summary"] == "Cat photo and a chart"
    assert header["projectHash"] == orjson.loads(session.lines[0])["projectHash"]
    assert [m["id"] for m in messages] == list(session.messages)
    text = bytes(files[current]).decode()
    assert "inlineData" not in text and "iVBOR" not in text
    u1 = messages[0]["content"][1]["text"]
    assert u1.startswith("[image cut by scrollback slim: image/png, 30,000 bytes")
    assert f"ref {SESSION}/u1/0 pin " in u1
    notes = [p for call in messages[3]["toolCalls"] for p in call["result"]]
    assert f"ref {SESSION}/g2/1" in notes[1]["text"]
    assert f"ref {SESSION}/g2/0" in notes[0]["functionResponse"]["parts"][0]["text"]
    assert messages[3]["tokens"]["input"] == 2000  # the latest version of the message
