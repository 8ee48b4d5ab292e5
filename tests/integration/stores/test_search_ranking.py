"""Relevance, paging across new entries, and partial answers, over real history servers.

On both backends (Tantivy, PostgreSQL): on a fixed corpus, the session whose
prompt holds the phrase ranks first, and a word in a user's prompt or a
summary ranks above the same word in a tool's output, however new and
however often it is repeated there; newest first stays one field away. The
pages of one search serve the entries indexed at its first page, whatever
is indexed meanwhile. A search answered before the first pass over the root
ended says partial.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from scrollback.search.v1 import search_pb2 as spb
from tests.integration.stores import test_search
from tests.integration.stores.test_search import ADMIN, NEWEST, Factory, Harness, at, entry
from tests.support.history import line

# The fixture of a history server on each backend.
search_server = test_search.search_server
RELEVANCE = spb.SEARCH_ORDER_RELEVANCE


def tool_dump(uuid: str, text: str, timestamp: str) -> bytes:
    """A tool's result: a user-role entry holding a long tool_result."""
    return line(
        type="user",
        uuid=uuid,
        timestamp=timestamp,
        message={
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}],
        },
    )


def _corpus(harness: Harness) -> None:
    filler = " ".join(f"line {n} of the dump" for n in range(150))
    harness.transcript("prompted").write_bytes(
        entry("p1", "Add rate limiting to the upload API", timestamp=at(1))
        + entry("p2", "ok, adding it now", kind="assistant", timestamp=at(2))
    )
    # Newer sessions whose tool output mentions the words, many times and apart.
    harness.transcript("dumps").write_bytes(
        b"".join(
            tool_dump(
                f"d{n}", f"{filler} rate {filler} limiting rate limiting {filler}", at(10 + n)
            )
            for n in range(5)
        )
        + tool_dump("d9", f"the rate of change {filler} limiting factor", at(20))
    )
    harness.transcript("other").write_bytes(
        entry("o1", "what limits the throughput here?", timestamp=at(5))
        + line(type="summary", summary="Throughput tuning", leafUuid="o1")
        + tool_dump("o2", f"{filler} throughput {filler} throughput {filler}", at(21))
    )


async def test_the_prompt_with_the_phrase_ranks_first(search_server: Factory) -> None:
    async with search_server() as harness:
        _corpus(harness)
        await harness.until("dump", 7)
        await harness.until("upload", 1)
        await harness.until("throughput", 3)
        phrase, _ = await harness.page('"rate limiting"')
        assert phrase[0].entry_uuid == "p1" and phrase[0].session_id == "prompted"
        words, _ = await harness.page("rate limiting", order=RELEVANCE)
        assert words[0].entry_uuid == "p1" and len(words) == 7
        # A word in a summary (a title) and in a prompt above the same word in tool output.
        title, _ = await harness.page("throughput")
        assert [h.type or h.entry_uuid for h in title][:2] in (
            ["summary", "user"],
            ["user", "summary"],
        )
        assert title[-1].entry_uuid == "o2"
        # Newest first on request: the newest dump, then the others.
        newest, _ = await harness.page("rate limiting", order=NEWEST)
        assert [h.entry_uuid for h in newest] == ["d9", "d4", "d3", "d2", "d1", "d0", "p1"]


async def _all_pages(harness: Harness, query: str, size: int, **request: Any) -> list[str]:
    seen: list[str] = []
    token = ""
    while True:
        hits, token = await harness.page(query, page_size=size, page_token=token, **request)
        seen += [h.entry_uuid for h in hits]
        if not token:
            return seen


async def test_pages_hold_across_new_entries(search_server: Factory) -> None:
    async with search_server() as harness:
        path = harness.transcript("s1")
        path.write_bytes(
            b"".join(
                entry(f"u{n}", "guava " * (1 + n % 4) + f"number {n}", timestamp=at(n % 20))
                for n in range(12)
            )
        )
        await harness.until("guava", 12)
        for order in (RELEVANCE, NEWEST):
            expected = await _all_pages(harness, "guava", 100, order=order)
            first, token = await harness.page("guava", page_size=5, order=order)
            # New entries, some more relevant and some newer than any served.
            with path.open("ab") as handle:
                for n in range(6):
                    handle.write(entry(f"new{order}-{n}", "guava " * 9, timestamp=at(23)))
            total = 12 + 6 * (1 if order == RELEVANCE else 2)
            await harness.until("guava", total, page_size=100, order=order)
            seen = [h.entry_uuid for h in first]
            while token:
                hits, token = await harness.page(
                    "guava", page_size=5, page_token=token, order=order
                )
                seen += [h.entry_uuid for h in hits]
            assert seen == expected, order


async def test_an_answer_before_the_first_pass_is_partial(search_server: Factory) -> None:
    async with search_server() as harness:
        harness.transcript("s1").write_bytes(entry("u1", "quince"))
        await harness.until("quince", 1)
        deadline = time.monotonic() + 10
        while True:
            call = harness.search.Search(spb.SearchRequest(query="quince"), metadata=ADMIN)
            ends = [m.end for m in [m async for m in call] if m.HasField("end")]
            if not ends[0].partial or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert not ends[0].partial
