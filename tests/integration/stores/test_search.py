"""Search over real history servers, on both index backends (Tantivy, PostgreSQL).

Each test starts a history server with auth (alice sees proj-a, bob proj-b,
admin everything) over a fresh root, with its search index in the state dir
or in a throwaway PostgreSQL database, writes transcripts and drives
`scrollback.search.v1.SearchService/Search` through its port, waiting for
the background indexer where the transcripts just changed.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc

from history_service.config import HistoryConfig
from history_service.search.embedded import TantivySearchIndex
from history_service.search.postgres import PostgresSearchIndex
from history_service.search.query import Filters, parse_query
from history_service.search.store import EntryRow, Order, Page, SearchIndex
from history_service.server import RunningHistoryServer, start_history_server
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.search.v1 import search_pb2 as spb
from scrollback.search.v1 import search_pb2_grpc
from scrollback.server.auth import SecuritySettings
from scrollback.state.postgres import open_pool
from tests.support.history import line
from tests.support.security import auth, write_token_file
from tests.support.servers import png

ADMIN = auth("admin")
NEWEST = spb.SEARCH_ORDER_NEWEST


@dataclass
class Harness:
    """A history server with search, its root and stubs."""

    root: Path
    server: RunningHistoryServer
    search: search_pb2_grpc.SearchServiceStub
    history: history_pb2_grpc.HistoryServiceStub
    channel: grpc.aio.Channel

    def transcript(self, session_id: str, project: str = "proj-a") -> Path:
        directory = self.root / project
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{session_id}.jsonl"

    async def page(
        self, query: str, metadata: Any = ADMIN, **request: Any
    ) -> tuple[list[spb.SearchHit], str]:
        hits: list[spb.SearchHit] = []
        token: str | None = None
        call = self.search.Search(spb.SearchRequest(query=query, **request), metadata=metadata)
        async for message in call:
            if message.HasField("hit"):
                assert token is None, "a hit after the end"
                hits.append(message.hit)
            else:
                token = message.end.next_page_token
        assert token is not None, "no SearchEnd"
        return hits, token

    async def until(
        self, query: str, count: int, metadata: Any = ADMIN, **request: Any
    ) -> list[spb.SearchHit]:
        """The hits once there are `count` of them (the indexer runs in the background)."""
        deadline = time.monotonic() + 15
        while True:
            hits, _ = await self.page(query, metadata, **request)
            if len(hits) == count or time.monotonic() > deadline:
                assert len(hits) == count, [h.entry_uuid for h in hits]
                return hits
            await asyncio.sleep(0.05)


Factory = Callable[[], Any]


@pytest.fixture(params=["tantivy", "postgres"])
def search_server(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    """`async with search_server() as harness` on the test's backend."""
    database_url = ""
    if request.param == "postgres":
        make_database = request.getfixturevalue("make_database")
        database_url = make_database()

    @asynccontextmanager
    async def start() -> AsyncIterator[Harness]:
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        config = HistoryConfig.from_env(
            {},
            transcripts=root,
            state_dir=tmp_path / "state",
            addr="127.0.0.1:0",
            rescan_interval_seconds=0.05,
            search_interval_seconds=0.05,
            database_url=database_url,
            security=SecuritySettings(auth_tokens=write_token_file(tmp_path / "tokens.yaml")),
        )
        server = await start_history_server(config)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        try:
            yield Harness(
                root,
                server,
                search_pb2_grpc.SearchServiceStub(channel),
                history_pb2_grpc.HistoryServiceStub(channel),
                channel,
            )
        finally:
            await channel.close()
            await server.stop(0.5)

    return start


def entry(
    uuid: str,
    text: str,
    *,
    kind: str = "user",
    role: str | None = None,
    timestamp: str = "2025-06-01T10:00:00.000Z",
    images: int = 0,
) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for index in range(images):
        data = base64.b64encode(png(index, 40)).decode()
        content.append(
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
        )
    return line(
        type=kind,
        uuid=uuid,
        sessionId="s",
        timestamp=timestamp,
        message={"role": role or kind, "content": content},
    )


def at(hour: int) -> str:
    return f"2025-06-01T{hour:02d}:00:00.000Z"


async def test_hits_are_newest_first_with_marked_snippets(search_server: Factory) -> None:
    async with search_server() as harness:
        harness.transcript("s1").write_bytes(
            entry("u1", "the first ripe banana of the day", timestamp=at(9))
            + entry("u2", "a banana, ripe and yellow", timestamp=at(11))
        )
        harness.transcript("s2").write_bytes(
            entry("u3", "Banana bread recipe", timestamp=at(10))
            + entry("u4", "nothing to see here", timestamp=at(12))
        )
        hits = await harness.until("banana", 3, order=NEWEST)
        assert [h.entry_uuid for h in hits] == ["u2", "u3", "u1"]
        assert [h.session_id for h in hits] == ["s1", "s2", "s1"]
        assert hits[0].timestamp == at(11) and hits[0].type == "user"
        assert hits[0].project_dir == "proj-a" and hits[0].role == "user"
        for hit in hits:
            marked = [hit.snippet.text[m.start : m.end] for m in hit.snippet.highlights]
            assert marked and all(word.lower() == "banana" for word in marked)
        # A phrase needs its words in order; a prefix matches longer words; a word does not.
        phrase, _ = await harness.page('"ripe banana"')
        assert [h.entry_uuid for h in phrase] == ["u1"]
        both, _ = await harness.page("ripe banana")
        assert {h.entry_uuid for h in both} == {"u1", "u2"}
        prefix, _ = await harness.page("bana*")
        assert len(prefix) == 3
        assert (await harness.page("bana"))[0] == []
        marked = [prefix[0].snippet.text[m.start : m.end] for m in prefix[0].snippet.highlights]
        assert [word.lower() for word in marked] == ["banana"]


async def test_each_filter(search_server: Factory) -> None:
    async with search_server() as harness:
        harness.transcript("s1").write_bytes(
            entry("u1", "kiwi from the user", timestamp=at(9))
            + entry("u2", "kiwi from the model", kind="assistant", timestamp=at(10))
            + entry("u3", "kiwi with a photo", timestamp=at(11), images=2)
            + line(type="summary", summary="kiwi summary", leafUuid="u3")
        )
        harness.transcript("s2", "proj-b").write_bytes(entry("u4", "kiwi in b", timestamp=at(12)))
        await harness.until("kiwi", 5)

        async def uuids(**request: Any) -> list[str]:
            hits = (await harness.page("kiwi", order=NEWEST, **request))[0]
            return [h.entry_uuid or h.type for h in hits]

        assert await uuids(project_dir="proj-b") == ["u4"]
        assert await uuids(session_id="s1") == ["u3", "u2", "u1", "summary"]
        assert await uuids(entry_types=["assistant", "summary"]) == ["u2", "summary"]
        assert await uuids(roles=["assistant"]) == ["u2"]
        start, end = Timestamp(), Timestamp()
        start.FromJsonString(at(10))
        end.FromJsonString(at(12))
        assert await uuids(start_time=start, end_time=end) == ["u3", "u2"]
        assert await uuids(start_time=start) == ["u4", "u3", "u2"]
        assert await uuids(photos=spb.PHOTO_FILTER_WITH_PHOTOS) == ["u3"]
        assert "u3" not in await uuids(photos=spb.PHOTO_FILTER_WITHOUT_PHOTOS)
        photo = (await harness.page("photo"))[0][0]
        assert photo.has_photos


async def test_paging_covers_every_hit_once(search_server: Factory) -> None:
    async with search_server() as harness:
        harness.transcript("s1").write_bytes(
            b"".join(entry(f"u{i}", f"mango number {i}", timestamp=at(i)) for i in range(7))
            # Two entries at one time: both are served, in a stable order.
            + entry("same", "mango twin", timestamp=at(3))
        )
        await harness.until("mango", 8)
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            hits, token = await harness.page("mango", page_size=3, page_token=token, order=NEWEST)
            seen += [h.entry_uuid for h in hits]
            pages += 1
            if not token:
                break
        assert pages == 3
        assert sorted(seen) == sorted(["same", *(f"u{i}" for i in range(7))])
        assert seen[:3] == ["u6", "u5", "u4"] and seen[-2:] == ["u1", "u0"]
        assert set(seen[3:5]) == {"u3", "same"} and seen[5] == "u2"
        # A token is the caller's own: another principal's use of it is refused.
        _, first_token = await harness.page("mango", page_size=3, order=NEWEST)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await harness.page(
                "mango", auth("alice"), page_size=3, page_token=first_token, order=NEWEST
            )
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # ... and so is a token used for a search in another order.
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await harness.page("mango", page_size=3, page_token=first_token)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_hit_opens_its_window(search_server: Factory) -> None:
    async with search_server() as harness:
        harness.transcript("s1").write_bytes(
            b"".join(entry(f"u{i}", f"filler line {i}", timestamp=at(1)) for i in range(30))
            + entry("target", "the papaya is here", timestamp=at(2))
            + b"".join(entry(f"v{i}", f"later line {i}", timestamp=at(3)) for i in range(30))
        )
        (hit,) = await harness.until("papaya", 1)
        entries: list[hpb.Entry] = []
        end = None
        call = harness.history.ReadWindow(
            hpb.ReadWindowRequest(session_id="s1", page_token=hit.window_page_token, page_size=5),
            metadata=ADMIN,
        )
        async for message in call:
            if message.HasField("entry"):
                entries.append(message.entry)
            elif message.HasField("end"):
                end = message.end
        assert [e.uuid for e in entries] == ["u26", "u27", "u28", "u29", "target"]
        assert entries[-1].byte_offset == hit.byte_offset
        assert end is not None and end.next_page_token


async def test_payloads_and_the_envelope_never_match(search_server: Factory) -> None:
    async with search_server() as harness:
        image = entry("u1", "look at this lychee", images=1)
        payload = base64.b64encode(png(0, 40)).decode()
        short = base64.b64encode(os.urandom(300)).decode().replace("+", "a").replace("/", "b")
        tool = line(
            type="assistant",
            uuid="u2",
            timestamp=at(3),
            message={
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Write", "input": {"blob": short}}
                ],
            },
        )
        harness.transcript("s1").write_bytes(image + tool)
        await harness.until("lychee", 1)
        await harness.until("write", 1)
        for probe in (payload[:40], payload[100:160], short[:60]):
            word = "".join(ch for ch in probe if ch.isalnum())
            assert (await harness.page(word))[0] == []
            assert (await harness.page(word[:12] + "*"))[0] == []
        for envelope in ("sessionId", "uuid", "media_type", "base64", "tool_use"):
            assert (await harness.page(envelope))[0] == []


async def test_mime_wrapped_base64_is_a_payload(search_server: Factory) -> None:
    # As e-mail and `base64` write it: 76-character lines, here in a message and a tool result.
    data = os.urandom(3000)
    wrapped = base64.encodebytes(data).decode()
    pem = "\r\n".join(textwrap.wrap(base64.b64encode(data[:700]).decode(), 64))
    async with search_server() as harness:
        harness.transcript("s1").write_bytes(
            entry("u1", f"the attachment of the quokka mail:\n{wrapped}sent by the quokka")
            + line(
                type="user",
                uuid="u2",
                timestamp=at(2),
                message={
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": f"-----BEGIN CERTIFICATE-----\r\n{pem}\r\n"
                            "-----END CERTIFICATE----- of the quokka",
                        }
                    ],
                },
            )
        )
        hits = await harness.until("quokka", 2)
        flat = base64.b64encode(data).decode()
        for hit in hits:
            assert not any(flat[i : i + 8] in hit.snippet.text for i in range(len(flat) - 8))
        probes = [w for w in re.findall(r"[A-Za-z0-9]{8,}", flat[200:]) if not w.isdigit()][:8]
        probes += [p for p in re.findall(r"[A-Za-z0-9]{8,}", pem[100:]) if not p.isdigit()][:4]
        assert len(probes) >= 6
        for word in probes:
            assert (await harness.page(word))[0] == [], word
            assert (await harness.page(word[:6] + "*"))[0] == [], word
        # The words around the payloads are still found, as words of one text.
        assert [h.entry_uuid for h in (await harness.page('"quokka mail"'))[0]] == ["u1"]
        assert [h.entry_uuid for h in (await harness.page("certificate"))[0]] == ["u2"]


async def test_growth_is_indexed_and_a_rewrite_reindexed(search_server: Factory) -> None:
    async with search_server() as harness:
        path = harness.transcript("s1")
        path.write_bytes(entry("u1", "cherry one", timestamp=at(1)))
        await harness.until("cherry", 1)
        with path.open("ab") as handle:
            handle.write(entry("u2", "cherry two", timestamp=at(2)))
            handle.write(entry("u3", "cherry three", timestamp=at(3))[:-1])  # no newline yet
        hits = await harness.until("cherry", 2)
        assert [h.entry_uuid for h in hits] == ["u2", "u1"]
        with path.open("ab") as handle:
            handle.write(b"\n")
        await harness.until("cherry", 3)
        # Rewritten (a new file in its place): the old text goes, the new text is found.
        replacement = path.with_suffix(".tmp")
        replacement.write_bytes(entry("w1", "plum only", timestamp=at(4)))
        os.replace(replacement, path)
        await harness.until("cherry", 0)
        (hit,) = await harness.until("plum", 1)
        assert hit.entry_uuid == "w1"
        path.unlink()
        await harness.until("plum", 0)


async def test_another_principals_sessions_never_appear(search_server: Factory) -> None:
    async with search_server() as harness:
        harness.transcript("mine", "proj-a").write_bytes(entry("a1", "durian a", timestamp=at(1)))
        harness.transcript("theirs", "proj-b").write_bytes(entry("b1", "durian b", timestamp=at(2)))
        await harness.until("durian", 2)
        alice = auth("alice")
        hits, token = await harness.page("durian", alice)
        assert [h.entry_uuid for h in hits] == ["a1"] and token == ""
        assert (await harness.page("durian", alice, project_dir="proj-b"))[0] == []
        assert (await harness.page("durian", alice, page_size=1))[1] == ""
        codes = []
        for session in ("theirs", "nosuchsession"):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await harness.page("durian", alice, session_id=session)
            codes.append((error.value.code(), error.value.details()))
        assert codes[0] == codes[1] and codes[0][0] == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await harness.page("durian", ())
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    "request_fields",
    [
        {"query": ""},
        {"query": "!!! ***"},
        {"query": "x" * 1001},
        {"query": "a", "page_size": -1},
        {"query": "a", "photos": 7},
        {"query": "a", "page_token": "garbage"},
        {"query": "a", "session_id": "../etc"},
        {"query": "a", "project_dir": "a/b"},
        {"query": "a", "entry_types": ["t"] * 17},
        {"query": "a", "order": 9},
    ],
)
async def test_bad_requests_are_invalid_argument(
    search_server: Factory, request_fields: dict[str, Any]
) -> None:
    async with search_server() as harness:
        fields = dict(request_fields)
        query = fields.pop("query")
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await harness.page(query, **fields)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "/" not in error.value.details()


async def test_a_listed_project_dir_with_a_backslash_is_a_search_filter(
    search_server: Factory,
) -> None:
    """A directory name may hold `\\` on POSIX: what ListSessions lists, Search filters by."""
    async with search_server() as harness:
        harness.transcript("s1", "proj\\back").write_bytes(entry("u1", "mango in a backslash dir"))
        harness.transcript("s2").write_bytes(entry("u2", "mango elsewhere"))
        await harness.until("mango", 2)
        listed = await harness.history.ListSessions(hpb.ListSessionsRequest(), metadata=ADMIN)
        assert "proj\\back" in {s.project_dir for s in listed.sessions}
        hits, _ = await harness.page("mango", project_dir="proj\\back")
        assert [(h.entry_uuid, h.project_dir) for h in hits] == [("u1", "proj\\back")]


async def test_health_lists_the_search_service(search_server: Factory) -> None:
    async with search_server() as harness:
        health = health_pb2_grpc.HealthStub(harness.channel)
        answer = await health.Check(
            health_pb2.HealthCheckRequest(service="scrollback.search.v1.SearchService")
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(params=["tantivy", "postgres"])
def search_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchIndex]:
    """A fresh SearchIndex on each backend."""
    index: SearchIndex
    if request.param == "postgres":
        url = request.getfixturevalue("make_database")()
        index = PostgresSearchIndex(open_pool(url, name="search-test"))
    else:
        index = TantivySearchIndex(tmp_path / "state")
    try:
        yield index
    finally:
        index.close()


def _row(offset: int, text: str, ts_ms: int | None = 1000) -> EntryRow:
    return EntryRow(offset, offset + 10, f"u{offset}", "user", "user", "t", ts_ms, False, text)


NEWEST_PAGE = Page(Order.NEWEST)


def test_index_contract(search_index: SearchIndex) -> None:
    index = search_index
    file_id = index.reset_file("p/s.jsonl", "p", "s", "1:2:3:4")
    # Two rows with one place and time hash to one key: both are kept.
    assert index.add_entries(file_id, [_row(0, "fig one"), _row(0, "fig two")], 0, 20)
    state = index.files()["p/s.jsonl"]
    assert (state.file_id, state.indexed_to, state.identity) == (file_id, 20, "1:2:3:4")
    # A batch that does not start at the file's progress is another indexer's: not written.
    assert not index.add_entries(file_id, [_row(5, "fig late")], 0, 30)
    assert index.files()["p/s.jsonl"].indexed_to == 20
    with pytest.raises(LookupError):
        index.add_entries(file_id + 999, [_row(0, "x")], 0, 5)
    other = index.reset_file("q/t.jsonl", "q", "t", "5:6:7:8")
    assert index.add_entries(other, [_row(0, "fig three", 2000)], 0, 10)
    index.flush()
    hits = index.search(parse_query("fig"), Filters(), None, NEWEST_PAGE, 10)
    assert hits[0].text == "fig three" and len(hits) == 3
    assert len({h.key for h in hits}) == 3
    assert [
        h.text
        for h in index.search(parse_query("fig"), Filters(), frozenset({"q"}), NEWEST_PAGE, 10)
    ] == ["fig three"]
    assert index.search(parse_query("fig"), Filters(), frozenset(), NEWEST_PAGE, 10) == []
    below = index.search(parse_query("fig"), Filters(), None, NEWEST_PAGE.after(hits[0]), 10)
    assert [h.key for h in below] == [h.key for h in hits[1:]]
    # Resetting a file drops its entries; dropping forgets it.
    index.reset_file("p/s.jsonl", "p", "s", "9:9:9:9")
    index.flush()
    assert [h.text for h in index.search(parse_query("fig"), Filters(), None, NEWEST_PAGE, 10)] == [
        "fig three"
    ]
    index.drop_file("q/t.jsonl")
    index.flush()
    assert index.search(parse_query("fig"), Filters(), None, NEWEST_PAGE, 10) == []
    assert set(index.files()) == {"p/s.jsonl"}
    # A word longer than PostgreSQL keeps a lexeme (2 KiB) is cut alike when indexed and asked.
    long = index.reset_file("r/u.jsonl", "r", "u", "1:1:1:1")
    assert index.add_entries(long, [_row(0, "ж" * 1500 + " end")], 0, 10)
    index.flush()
    for projects in (None, frozenset({"r"})):
        hits = index.search(parse_query("ж" * 900), Filters(), projects, NEWEST_PAGE, 10)
        assert [h.text[-3:] for h in hits] == ["end"]
