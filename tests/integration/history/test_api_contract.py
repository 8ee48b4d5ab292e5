"""One API contract over the three sources: Claude Code, Codex and opencode, through both servers.

Each source writes a session in its own format (a Claude Code transcript, a
Codex rollout, rows of an opencode database) holding the same messages, one
with an image, and can append a message. The same tests then run against
each: latest-first pages agree with one oldest-first window, every ref of a
window reads back its image byte-exact, a watch streams an appended
message, and search finds the appended message's words (never a payload).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as pb
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from tests.integration.history.test_codex_rollouts import Stubs
from tests.support.codex import Rollout, write_rollout
from tests.support.opencode import OpencodeDb
from tests.support.servers import ServerPair, png, user_line

# Every image of the sessions is cut at this inline limit.
LIMIT = 1024
WORDS = ("kingfisher", "cormorant", "sandpiper", "plover")
PICTURE = png(7)


class Writer(Protocol):
    """A session of one source: made with messages, grown by one more."""

    def create(self, texts: list[str], image: bytes) -> str: ...

    def append(self, session_id: str, text: str) -> None: ...


@dataclass
class ClaudeWriter:
    pair: ServerPair

    def create(self, texts: list[str], image: bytes) -> str:
        session = str(uuid.uuid4())
        lines = [
            user_line(str(uuid.uuid4()), text, images=(image,) if n == 1 else ())
            for n, text in enumerate(texts)
        ]
        self.pair.transcript(session).write_bytes(b"".join(lines))
        return session

    def append(self, session_id: str, text: str) -> None:
        with self.pair.transcript(session_id).open("ab") as handle:
            handle.write(user_line(str(uuid.uuid4()), text))


@dataclass
class CodexWriter:
    directory: Path
    rollouts: dict[str, tuple[Rollout, Path]] = field(default_factory=dict)

    def create(self, texts: list[str], image: bytes) -> str:
        session = str(uuid.uuid4())
        rollout = Rollout(session)
        rollout.meta()
        for n, text in enumerate(texts):
            rollout.user(text, [image] if n == 1 else [])
        self.rollouts[session] = (rollout, write_rollout(self.directory, rollout))
        return session

    def append(self, session_id: str, text: str) -> None:
        rollout, path = self.rollouts[session_id]
        start = len(rollout.text())
        rollout.user(text, [])
        with path.open("ab") as handle:
            handle.write(rollout.text()[start:])


@dataclass
class OpencodeWriter:
    db: OpencodeDb

    def create(self, texts: list[str], image: bytes) -> str:
        session = self.db.session("contract")
        for n, text in enumerate(texts):
            self.db.user(session, text, *([image] if n == 1 else []))
        return session

    def append(self, session_id: str, text: str) -> None:
        self.db.user(session_id, text)


@dataclass
class Served:
    """Both servers over the three sources, and their clients."""

    pair: ServerPair
    stubs: Stubs
    database: OpencodeDb


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("api")
    database = OpencodeDb(base / "opencode.db")
    pair = ServerPair(base / "root", base / "state", codex=base / "codex", opencode=database.path)
    try:
        pair.start_history(0)
        pair.start_media(0)
        stubs = Stubs(pair)
        yield Served(pair, stubs, database)
        stubs.close()
    finally:
        pair.close()
        database.close()


@pytest.fixture(params=["claude-code", "codex", "opencode"])
def source(request: pytest.FixtureRequest, served: Served) -> Writer:
    if request.param == "claude-code":
        return ClaudeWriter(served.pair)
    if request.param == "codex":
        assert isinstance(served.pair.codex, Path)
        return CodexWriter(served.pair.codex)
    return OpencodeWriter(served.database)


def _texts(tag: str) -> list[str]:
    return [f"{word} {tag}" for word in WORDS]


def _window(stubs: Stubs, session: str, **request: Any) -> tuple[list[pb.Entry], pb.WindowEnd]:
    request.setdefault("inline_limit_bytes", LIMIT)
    return stubs.window(session, **request)


def test_latest_first_pages_agree_with_one_oldest_first_window(
    served: Served, source: Writer
) -> None:
    stubs = served.stubs
    session = source.create(_texts("pages"), PICTURE)
    whole, end = _window(stubs, session, direction=pb.READ_DIRECTION_OLDEST_FIRST)
    assert not end.next_page_token
    pages: list[pb.Entry] = []
    token = ""
    while True:
        history = stubs.history.ReadWindow(
            pb.ReadWindowRequest(
                session_id=session, page_size=1, page_token=token, inline_limit_bytes=LIMIT
            ),
            timeout=10,
        )
        page: list[pb.Entry] = []
        for message in history:
            kind = message.WhichOneof("item")
            if kind == "entry":
                page.append(message.entry)
            elif kind == "entries":
                page.extend(message.entries.entries)
            elif kind == "end":
                token = message.end.next_page_token
        pages[:0] = page
        if not token:
            break
    assert [e.json for e in pages] == [e.json for e in whole]
    # The messages' words in the order written; no payload in any entry.
    said = [word for entry in whole for word in WORDS if word in entry.json]
    assert list(dict.fromkeys(said)) == list(WORDS)
    assert all(base64.b64encode(PICTURE)[:200].decode() not in e.json for e in whole)


def test_every_ref_reads_back_its_image_byte_exact(served: Served, source: Writer) -> None:
    stubs = served.stubs
    session = source.create(_texts("refs"), PICTURE)
    entries, _ = _window(stubs, session)
    refs = [ref for entry in entries for ref in entry.media_refs]
    assert refs
    for ref in refs:
        for hint in (True, False):
            metadata, data = stubs.read(ref, hint=hint)
            assert data == PICTURE and metadata.content_type == "image/png"


def test_a_watch_streams_an_appended_message(served: Served, source: Writer) -> None:
    stubs = served.stubs
    session = source.create(_texts("watch"), PICTURE)
    call = stubs.history.WatchSession(pb.WatchSessionRequest(session_id=session), timeout=30)
    appended = False
    try:
        for message in call:
            kind = message.WhichOneof("event")
            if kind == "heartbeat" and not appended:
                source.append(session, "an egret arrived")
                appended = True
            elif kind == "entry":
                assert "an egret arrived" in message.entry.json
                break
    finally:
        call.cancel()
    assert appended


def test_search_finds_an_appended_messages_words(served: Served, source: Writer) -> None:
    pair = served.pair
    session = source.create(_texts("search"), PICTURE)
    word = f"wagtail{uuid.uuid4().hex[:8]}"
    source.append(session, f"the {word} sings")
    hits: list[Any] = []
    deadline = time.monotonic() + 20
    with grpc.insecure_channel(pair.history_addr) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)

        def search(query: str) -> list[Any]:
            request = search_pb2.SearchRequest(query=query, session_id=session)
            return [
                m.hit for m in stub.Search(request, timeout=10) if m.WhichOneof("item") == "hit"
            ]

        while not hits and time.monotonic() < deadline:  # the indexer catches up
            hits = search(word)
            time.sleep(0.1)
        assert hits and all(hit.session_id == session for hit in hits)
        assert search(base64.b64encode(PICTURE)[100:140].decode()) == []
