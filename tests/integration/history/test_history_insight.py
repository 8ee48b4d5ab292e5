"""Session insight over real history servers on both state backends (issue 17).

Expected totals are computed here from the raw files with json.loads,
independently of the server's stripper and index: entries by type, and
usage with each message.id counted once (the field-wise maximum of its
lines' usage, since a streamed message's later lines carry the final
output count). A generated session repeats usage lines so the naive sum
over-counts; growth, rewrites and sub-agent links are checked through the RPCs.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrollback.history.v1 import history_pb2 as pb
from tests.support.backends import state_backend
from tests.support.history import HarnessFactory, expect_error, line, read_all

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
EF_PARENT = "ef958aa1-0e93-49f0-bb71-150f63befcd1"
EF_AGENT = "agent-a4ca7529859c158c2"
EF_TOOL_USE = "toolu_01GmrK6tgdD9D5xD6W5X9UUy"
EF_PREFIX = "iansherr__claude-code-log/test__test_data__real_projects__-experiments-worktrees__"
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """History config overrides selecting the state backend."""
    yield from state_backend(request.param)


def expected(path: Path) -> dict[str, Any]:
    """Totals of a transcript from its raw JSON, each message.id once (field-wise max)."""
    counts: dict[str, int] = {}
    messages: dict[str, dict[str, int]] = {}
    naive = dict.fromkeys(USAGE_KEYS, 0)
    times: list[datetime] = []
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        kind = kind if isinstance(kind, str) else ""
        counts[kind] = counts.get(kind, 0) + 1
        stamp = entry.get("timestamp")
        if isinstance(stamp, str):
            try:
                moment = datetime.fromisoformat(stamp)
                times.append(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
            except ValueError:
                pass
        message = entry.get("message")
        if kind == "assistant" and isinstance(message, dict) and message.get("id"):
            usage = message.get("usage")
            if isinstance(usage, dict):
                values = {k: int(usage.get(k) or 0) for k in USAGE_KEYS}
                for k in USAGE_KEYS:
                    naive[k] += values[k]
                seen = messages.setdefault(message["id"], dict.fromkeys(USAGE_KEYS, 0))
                for k in USAGE_KEYS:
                    seen[k] = max(seen[k], values[k])
    usage = {k: sum(m[k] for m in messages.values()) for k in USAGE_KEYS}
    return {
        "counts": counts,
        "usage": usage,
        "naive": naive,
        "messages": len(messages),
        "first": min(times) if times else None,
        "last": max(times) if times else None,
    }


def usage_of(insight: pb.SessionInsight) -> dict[str, int]:
    return {k: getattr(insight.usage, k) for k in USAGE_KEYS}


def check(insight: pb.SessionInsight, want: dict[str, Any]) -> None:
    assert {c.type: c.count for c in insight.entry_counts} == want["counts"]
    assert usage_of(insight) == want["usage"]
    assert sum(m.messages for m in insight.models) == want["messages"]
    if want["first"] is not None:
        assert insight.first_time.ToDatetime(tzinfo=UTC) == want["first"]
        assert insight.last_time.ToDatetime(tzinfo=UTC) == want["last"]


def copy_corpus(root: Path) -> dict[str, Path]:
    """Real transcripts under a root, the ef958aa1 session with its sub-agent in the layout."""
    project = root / "-experiments-worktrees"
    (project / EF_PARENT / "subagents").mkdir(parents=True)
    files = {
        EF_PARENT: project / f"{EF_PARENT}.jsonl",
        EF_AGENT: project / EF_PARENT / "subagents" / f"{EF_AGENT}.jsonl",
    }
    shutil.copy(CORPUS / f"{EF_PREFIX}{EF_PARENT}.jsonl", files[EF_PARENT])
    shutil.copy(CORPUS / f"{EF_PREFIX}{EF_PARENT}__subagents__{EF_AGENT}.jsonl", files[EF_AGENT])
    other = root / "other"
    other.mkdir()
    for name, source in {
        "dup-response": "slopus__happy/packages__happy-cli__src__claude__utils____fixtures"
        "____duplicate-assistant-response.jsonl",
        "task-sdk": "slopus__happy/packages__happy-cli__src__claude__utils____fixtures"
        "____task_sdk.jsonl",
        "viewer-fe5e": "d-kimuson__claude-code-viewer/mock-global-claude-dir__projects"
        "__sample-project__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
        "with-photo": "iansherr__claude-code-log/test__test_data__real_projects"
        "__-Users-dain-workspace-danieldemmel-me-next__9e953218-585f-4692-89df-9e0747a31c68.jsonl",
    }.items():
        files[name] = other / f"{name}.jsonl"
        shutil.copy(CORPUS / source, files[name])
    return files


async def get(harness: Any, session_id: str) -> pb.Session:
    response = await harness.stub.GetSession(pb.GetSessionRequest(session_id=session_id))
    return response.session


async def test_corpus_totals_match_the_raw_json(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        files = copy_corpus(harness.root)
        for session_id, path in files.items():
            session = await get(harness, session_id)
            want = expected(path)
            check(session.insight, want)
            assert session.insight.indexed_bytes == path.stat().st_size
        # The duplicate-response fixture really repeats usage: the naive sum is larger.
        dup = expected(files["dup-response"])
        assert dup["naive"]["output_tokens"] > dup["usage"]["output_tokens"]
        # Photos: the MANIFEST's count of images in message content.
        photo = await get(harness, "with-photo")
        assert photo.insight.photo_count == 1
        # Opus 4 is priced: cost is tokens times the table's list price.
        priced = (await get(harness, "dup-response")).insight
        assert priced.cost_complete and priced.models[0].model == "claude-opus-4-20250514"
        u = priced.usage
        want_cost = (
            u.input_tokens * 15
            + u.output_tokens * 75
            + u.cache_creation_input_tokens * 18.75
            + u.cache_read_input_tokens * 1.5
        ) / 1e6
        assert priced.cost_usd == pytest.approx(want_cost)
        # ListSessions carries the same insight.
        listed = {
            s.session_id: s
            for s in (await harness.stub.ListSessions(pb.ListSessionsRequest())).sessions
        }
        assert listed["viewer-fe5e"].insight == (await get(harness, "viewer-fe5e")).insight


async def test_repeated_usage_lines_count_once(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript("gen-usage")
        lines = [line(type="user", uuid="u0", message={"role": "user", "content": "go"})]
        for n in range(5):
            for block in range(4):
                # Streaming: the first line of a message says 1 output token, the last the total.
                output = 1 if block == 0 else 100 + n
                lines.append(
                    line(
                        type="assistant",
                        uuid=f"a{n}-{block}",
                        timestamp=f"2025-01-0{n + 1}T00:00:0{block}Z",
                        message={
                            "id": f"msg_{n}",
                            "model": "claude-sonnet-4-5-20250929",
                            "role": "assistant",
                            "content": [{"type": "text", "text": f"part {block}"}],
                            "usage": {
                                "input_tokens": 10,
                                "output_tokens": output,
                                "cache_creation_input_tokens": 1000,
                                "cache_read_input_tokens": 5000,
                            },
                        },
                    )
                )
                if block == 1:
                    lines.append(line(type="user", uuid=f"r{n}", message={"role": "user"}))
        path.write_bytes(b"".join(lines))
        session = await get(harness, "gen-usage")
        want = expected(path)
        check(session.insight, want)
        usage = usage_of(session.insight)
        assert usage == {
            "input_tokens": 50,
            "output_tokens": sum(100 + n for n in range(5)),
            "cache_creation_input_tokens": 5000,
            "cache_read_input_tokens": 25000,
        }
        assert want["naive"]["cache_read_input_tokens"] == 4 * usage["cache_read_input_tokens"]
        assert session.insight.cost_complete
        assert session.insight.cost_usd == pytest.approx(
            (50 * 3 + 510 * 15 + 5000 * 3.75 + 25000 * 0.3) / 1e6
        )


async def test_growth_updates_and_rewrite_recomputes(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        path = harness.transcript("grows")

        def assistant(uuid: str, message_id: str, output: int) -> bytes:
            return line(
                type="assistant",
                uuid=uuid,
                message={
                    "id": message_id,
                    "model": "some-new-model",
                    "usage": {"output_tokens": output},
                },
            )

        path.write_bytes(assistant("a1", "m1", 5) + assistant("a2", "m1", 5))
        first = await get(harness, "grows")
        assert first.insight.usage.output_tokens == 5
        assert not first.insight.cost_complete and first.insight.cost_usd == 0
        assert first.insight.models[0].model == "some-new-model"
        assert not first.insight.models[0].cost_known
        # Appended: a repeat of m1 with its final count, a new message, and a half-written line.
        with path.open("ab") as handle:
            handle.write(assistant("a3", "m1", 7) + assistant("a4", "m2", 11))
            handle.write(b'{"type":"assistant","uuid":"a5","message":{"id":"m3","usage":')
        grown = await get(harness, "grows")
        assert grown.insight.usage.output_tokens == 7 + 11
        assert {c.type: c.count for c in grown.insight.entry_counts} == {"assistant": 4}
        assert grown.insight.indexed_bytes < path.stat().st_size  # the tail waits
        with path.open("ab") as handle:
            handle.write(b'{"output_tokens":13}}}\n')
        done = await get(harness, "grows")
        assert done.insight.usage.output_tokens == 7 + 11 + 13
        assert done.insight.indexed_bytes == path.stat().st_size
        # Asking again reads nothing new.
        lines_read = harness.server.core.insight.lines_read
        await get(harness, "grows")
        assert harness.server.core.insight.lines_read == lines_read
        # Rewritten (a new file under the name): recomputed from scratch.
        replacement = path.with_suffix(".new")
        replacement.write_bytes(assistant("b1", "x1", 2))
        os.replace(replacement, path)
        rewritten = await get(harness, "grows")
        assert rewritten.insight.usage.output_tokens == 2
        assert {c.type: c.count for c in rewritten.insight.entry_counts} == {"assistant": 1}
        # Rewritten in place, same inode, longer than before: caught by the head hash.
        with path.open("r+b") as handle:
            handle.write(assistant("c1", "y1", 3) * 3)
        in_place = await get(harness, "grows")
        assert in_place.insight.usage.output_tokens == 3
        assert {c.type: c.count for c in in_place.insight.entry_counts} == {"assistant": 3}


async def test_subagent_linked_from_the_parents_tool_use(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        files = copy_corpus(harness.root)
        parent = await get(harness, EF_PARENT)
        assert parent.subagent_count == 1
        check(parent.subagent_insight, expected(files[EF_AGENT]))
        agent = await get(harness, EF_AGENT)
        assert agent.is_subagent
        assert agent.parent_session_id == EF_PARENT
        assert agent.parent_tool_use_id == EF_TOOL_USE
        # The parent's entries: the Task tool_use and its result both link the thread;
        # the parent's other agents have no transcript here, so they are not linked.
        linked: list[pb.Entry] = []
        for page in await read_all(harness.stub, EF_PARENT, pb.READ_DIRECTION_OLDEST_FIRST):
            linked += [e for e in page if e.subagent_links]
        by_type: dict[str, list[pb.SubagentLink]] = {}
        for entry in linked:
            assert [(x.tool_use_id, x.session_id) for x in entry.subagent_links] == [
                (EF_TOOL_USE, EF_AGENT)
            ]
            by_type.setdefault(entry.type, []).extend(entry.subagent_links)
            assert EF_TOOL_USE in entry.json
        # Other entries naming the call (an attachment about the task) link it too.
        assert {"assistant", "user"} <= set(by_type)
        tool_use = next(e for e in linked if e.type == "assistant")
        blocks = json.loads(tool_use.json)["message"]["content"]
        assert any(b.get("type") == "tool_use" and b.get("id") == EF_TOOL_USE for b in blocks)
        # Bootstrap's window links the same entries as ReadWindow's.
        window = await collect_window(harness.stub, EF_PARENT, 200)
        booted = [
            entry
            async for response in harness.stub.Bootstrap(
                pb.BootstrapRequest(session_id=EF_PARENT, page_size=200)
            )
            for entry in _entries_of(response)
        ]
        links = [(e.uuid, list(e.subagent_links)) for e in window]
        assert any(found for _, found in links)
        assert [(e.uuid, list(e.subagent_links)) for e in booted] == links


def _entries_of(response: pb.BootstrapResponse | pb.ReadWindowResponse) -> list[pb.Entry]:
    """The entry one Bootstrap or ReadWindow message carries (unbatched: no max_batch_bytes)."""
    if response.HasField("entry"):
        return [response.entry]
    return []


async def collect_window(stub: Any, session_id: str, page_size: int) -> list[pb.Entry]:
    """The latest window's entries, as ReadWindow sends them."""
    entries: list[pb.Entry] = []
    async for response in stub.ReadWindow(
        pb.ReadWindowRequest(session_id=session_id, page_size=page_size)
    ):
        entries += _entries_of(response)
    return entries


async def test_get_session_errors(history_server: HarnessFactory) -> None:
    async with history_server() as harness:
        await expect_error(
            harness.stub.GetSession(pb.GetSessionRequest(session_id="no-such")),
            grpc.StatusCode.NOT_FOUND,
            harness.tmp,
        )
        await expect_error(
            harness.stub.GetSession(pb.GetSessionRequest(session_id="../etc")),
            grpc.StatusCode.INVALID_ARGUMENT,
            harness.tmp,
        )


async def test_a_session_longer_than_a_batch_is_read_once(
    history_server: HarnessFactory, backend: dict[str, Any]
) -> None:
    async with history_server(**backend) as harness:
        index = harness.server.core.insight
        index.batch_lines = 3  # several committed batches in one pass
        path = harness.transcript("batched")
        path.write_bytes(
            b"".join(
                line(
                    type="assistant",
                    uuid=f"a{n}",
                    message={"id": f"m{n // 2}", "usage": {"output_tokens": 1}},
                )
                for n in range(20)
            )
        )
        session = await get(harness, "batched")
        check(session.insight, expected(path))
        assert session.insight.indexed_bytes == path.stat().st_size
        assert index.lines_read == 20
        await get(harness, "batched")
        assert index.lines_read == 20
