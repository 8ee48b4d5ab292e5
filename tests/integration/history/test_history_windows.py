"""ReadWindow over real files: paging while another process appends, tokens, errors, limits."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import textwrap

import grpc
import orjson
import xxhash

from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import (
    LATEST,
    OLDEST,
    HarnessFactory,
    HistoryHarness,
    collect,
    expect_error,
    line,
    read_all,
    read_page,
)

APPENDER = textwrap.dedent(
    """
    import json, os, sys, time
    path, start, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    for n in range(start, start + count):
        text = json.dumps({"type": "user", "uuid": f"u{n}", "n": n, "pad": "x" * (n % 7) * 50}) + "\\n"
        data = text.encode()
        if n % 10 == 3:
            os.write(fd, data[: len(data) // 2])   # half a line, then a pause
            time.sleep(0.03)
            os.write(fd, data[len(data) // 2 :])
        else:
            os.write(fd, data)
        time.sleep(0.004)
    os.close(fd)
    """
)


def _numbers(entries: list[pb.Entry]) -> list[int]:
    values = []
    for entry in entries:
        parsed = orjson.loads(entry.json)
        assert parsed["uuid"] == entry.uuid == f"u{parsed['n']}"
        values.append(parsed["n"])
    return values


async def test_paging_both_directions_while_another_process_appends(
    history: HistoryHarness,
) -> None:
    path = history.transcript("grow")
    path.write_bytes(b"".join(line(type="user", uuid=f"u{n}", n=n) for n in range(40)))
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", APPENDER, str(path), "40", "260"
    )
    try:
        seen_latest: list[list[int]] = []
        seen_oldest: list[list[int]] = []
        for _round in range(3):
            # latest-first: pages go back in time; each page in file order
            token = ""
            pages: list[list[int]] = []
            while True:
                page = await read_page(
                    history.stub, session_id="grow", page_size=9, page_token=token, direction=LATEST
                )
                numbers = _numbers(page.entries)
                assert numbers == sorted(numbers)
                offsets = [e.byte_offset for e in page.entries]
                assert offsets == sorted(offsets)
                pages.append(numbers)
                token = page.end.next_page_token
                await asyncio.sleep(0.01)
                if not token:
                    break
            flat = [n for page_numbers in reversed(pages) for n in page_numbers]
            assert flat == list(range(len(flat))), "latest-first lost or duplicated an entry"
            assert len(flat) >= 40
            seen_latest.append(flat)
            # oldest-first: pages go forward; tokens stay valid while the file grows
            token = ""
            flat = []
            while True:
                page = await read_page(
                    history.stub,
                    session_id="grow",
                    page_size=11,
                    page_token=token,
                    direction=OLDEST,
                )
                flat.extend(_numbers(page.entries))
                token = page.end.next_page_token
                await asyncio.sleep(0.01)
                if not token:
                    break
            assert flat == list(range(len(flat))), "oldest-first lost or duplicated an entry"
            seen_oldest.append(flat)
    finally:
        assert await asyncio.wait_for(writer.wait(), 30) == 0
    final = await read_all(history.stub, "grow", OLDEST, 200)
    assert [n for page in final for n in _numbers(page)] == list(range(300))


async def test_half_written_last_line_is_held_back(history: HistoryHarness) -> None:
    path = history.transcript("half")
    whole = line(type="user", uuid="a1", n=1)
    second = line(type="user", uuid="a2", n=2)
    path.write_bytes(whole + second[:10])
    for direction in (LATEST, OLDEST):
        page = await read_page(history.stub, session_id="half", direction=direction)
        assert [e.uuid for e in page.entries] == ["a1"]
    # a complete object without its newline is served
    path.write_bytes(whole + second.rstrip(b"\n"))
    for direction in (LATEST, OLDEST):
        page = await read_page(history.stub, session_id="half", direction=direction)
        assert [e.uuid for e in page.entries] == ["a1", "a2"]


async def test_empty_file_skipped_lines_and_no_uuid_lines(history: HistoryHarness) -> None:
    history.transcript("empty").write_bytes(b"")
    page = await read_page(history.stub, session_id="empty")
    assert (
        list(page.entries) == []
        and page.end.next_page_token == ""
        and page.end.file_size_bytes == 0
    )
    png = base64.b64encode(os.urandom(40_000)).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    history.transcript("mixed").write_bytes(
        b"not json\n[1,2]\n\n"
        + line(type="queue-operation", message={"content": [image]})
        + line(
            type="user",
            uuid="u1",
            message={"content": [image, {"type": "image", "source": {"data": ""}}]},
        )
    )
    page = await read_page(history.stub, session_id="mixed")
    assert page.end.skipped_lines == 2
    first, second = page.entries
    assert first.uuid == "" and png not in first.json
    # A line without a uuid names its entry by its offset (docs/contract.md §4).
    assert [r.entry_uuid for r in first.media_refs] == [f"at-{first.byte_offset}"]
    assert second.uuid == "u1" and [r.index for r in second.media_refs] == [0]
    assert list(second.failed_image_indexes) == [1]
    ref = second.media_refs[0]
    assert ref.session_id == "mixed" and ref.entry_uuid == "u1" and ref.uri == "mixed/u1/0"
    assert len(ref.pin) == 32 and ref.declared_media_type == "image/png"
    assert ref.approx_size_bytes == len(png) * 3 // 4
    inline = await read_page(history.stub, session_id="mixed", media_mode=pb.MEDIA_MODE_INLINE)
    assert png in inline.entries[1].json and not inline.entries[1].media_refs
    assert not inline.entries[1].payloads_deferred


async def test_large_entries_are_chunked_and_inline_sends_them_whole(
    history: HistoryHarness,
) -> None:
    prose = "é" * (2 * 1024 * 1024 + 3)  # ~4 MiB of two-byte characters: not base64
    # An 8.4 MB line: a 6 MB image and 2.4 MB of text.
    png = base64.b64encode(os.urandom(4_500_000)).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    words = {"type": "text", "text": "a b " * 600_000}
    history.transcript("big").write_bytes(
        line(type="assistant", uuid="p1", text=prose)
        + line(type="user", uuid="i1", message={"content": [words, image]})
    )
    for mode in (pb.MEDIA_MODE_DEFERRED, pb.MEDIA_MODE_INLINE):
        page = await read_page(history.stub, session_id="big", media_mode=mode)
        big, pic = page.entries
        assert orjson.loads(big.json)["text"] == prose
        assert not pic.payloads_deferred
        if mode == pb.MEDIA_MODE_INLINE:
            # docs/contract.md §3: INLINE returns lines whole up to the max line size.
            assert pic.line_size_bytes > 8_000_000 and len(pic.json) == pic.line_size_bytes
            assert png in pic.json and not pic.media_refs
        else:
            assert png not in pic.json and len(pic.media_refs) == 1


async def test_oversize_lines_get_a_stub(history_server: HarnessFactory) -> None:
    async with history_server(max_line_size=64 * 1024, default_inline_limit=1024) as history:
        history.transcript("huge").write_bytes(
            line(type="user", uuid="s1")
            + line(type="assistant", uuid="o1", text="word " * 40_000)
            + line(type="user", uuid="s2")
        )
        for direction in (LATEST, OLDEST):
            page = await read_page(history.stub, session_id="huge", direction=direction)
            small, stub, after = page.entries
            assert stub.oversize and "message too large to display" in stub.json
            assert stub.line_size_bytes > 64 * 1024 and (small.uuid, after.uuid) == ("s1", "s2")


async def test_oversize_stub_keeps_uuid_type_timestamp_and_non_objects_are_skipped(
    history_server: HarnessFactory,
) -> None:
    # docs/contract.md §3: the stub keeps the top-level uuid, type and timestamp
    # (Claude Code writes uuid and timestamp after the huge message), and an
    # oversize line that is not a JSON object is skipped and counted.
    prose = "word " * 40_000
    claude = (
        b'{"parentUuid":"s1","type":"assistant","message":{"uuid":"nested","content":'
        + orjson.dumps([{"type": "text", "text": prose}])
        + b'},"uuid":"o1","timestamp":"2025-06-01T10:00:00.000Z"}\n'
    )
    array = orjson.dumps([{"uuid": "a1", "type": "user", "text": prose}]) + b"\n"
    words = prose.encode() + b"\n"
    async with history_server(max_line_size=64 * 1024, default_inline_limit=1024) as history:
        history.transcript("edges").write_bytes(
            line(type="user", uuid="s1") + claude + array + words + line(type="user", uuid="s2")
        )
        for direction in (LATEST, OLDEST):
            page = await read_page(history.stub, session_id="edges", direction=direction)
            assert [e.uuid for e in page.entries] == ["s1", "o1", "s2"]
            stub = page.entries[1]
            assert stub.oversize and "message too large to display" in stub.json
            assert (stub.type, stub.timestamp) == ("assistant", "2025-06-01T10:00:00.000Z")
            assert orjson.loads(stub.json)["uuid"] == "o1"
            assert page.end.skipped_lines == 2


async def test_line_over_the_max_size_is_served_stripped_when_stripping_fits_it(
    history_server: HarnessFactory,
) -> None:
    # docs/contract.md §3: only a line still over the max line size AFTER
    # stripping is a stub. This one is 4x the max size, all of it one photo.
    payload = base64.b64encode(os.urandom(192 * 1024))
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": payload.decode()},
    }
    async with history_server(max_line_size=64 * 1024, default_inline_limit=1024) as history:
        history.transcript("photo").write_bytes(
            line(type="user", uuid="s1")
            + line(type="user", uuid="p1", message={"content": [image]})
            + line(type="user", uuid="s2")
        )
        for direction in (LATEST, OLDEST):
            page = await read_page(history.stub, session_id="photo", direction=direction)
            small, photo, after = page.entries
            assert not photo.oversize and photo.uuid == "p1"
            assert photo.line_size_bytes > 4 * 64 * 1024
            assert [ref.index for ref in photo.media_refs] == [0]
            assert photo.media_refs[0].pin == xxhash.xxh3_128_hexdigest(payload)
            assert payload.decode() not in photo.json
            assert (small.uuid, after.uuid) == ("s1", "s2")


async def test_token_and_request_errors(history: HistoryHarness) -> None:
    tmp = history.tmp
    path = history.transcript("s1")
    path.write_bytes(b"".join(line(type="user", uuid=f"u{n}", n=n) for n in range(30)))
    first = await read_page(history.stub, session_id="s1", page_size=10)
    token = first.end.next_page_token
    assert token
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", page_token="garbage!")),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    await expect_error(
        history.stub.ReadWindow(
            pb.ReadWindowRequest(session_id="s1", page_token=token[:-3] + "AAA")
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", page_size=-1)),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="../etc")),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", inline_limit_bytes=10)),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", direction=7)),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    # the token is valid while the file only grows
    with path.open("ab") as handle:
        handle.write(line(type="user", uuid="u30", n=30))
    second = await read_page(history.stub, session_id="s1", page_size=10, page_token=token)
    assert [e.uuid for e in second.entries] == [f"u{n}" for n in range(10, 20)]
    # a token of another session is not ours
    history.transcript("s2").write_bytes(path.read_bytes())
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s2", page_token=token)),
        grpc.StatusCode.INVALID_ARGUMENT,
        tmp,
    )
    # rewritten (in place, and replaced by rename), truncated: FAILED_PRECONDITION
    path.write_bytes(b"".join(line(type="user", uuid=f"v{n}", n=n) for n in range(31)))
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", page_token=token)),
        grpc.StatusCode.FAILED_PRECONDITION,
        tmp,
    )
    token = (await read_page(history.stub, session_id="s1", page_size=10)).end.next_page_token
    replacement = path.with_suffix(".tmp")
    replacement.write_bytes(path.read_bytes())
    os.replace(replacement, path)
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", page_token=token)),
        grpc.StatusCode.FAILED_PRECONDITION,
        tmp,
    )
    token = (await read_page(history.stub, session_id="s1", page_size=10)).end.next_page_token
    with path.open("r+b") as handle:
        handle.truncate(100)
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1", page_token=token)),
        grpc.StatusCode.FAILED_PRECONDITION,
        tmp,
    )
    # deleted: NOT_FOUND
    path.unlink()
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="s1")),
        grpc.StatusCode.NOT_FOUND,
        tmp,
    )
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="nope")),
        grpc.StatusCode.NOT_FOUND,
        tmp,
    )


async def test_page_size_is_cut_to_200(history: HistoryHarness) -> None:
    history.transcript("many").write_bytes(
        b"".join(line(type="user", uuid=f"u{n}", n=n) for n in range(450))
    )
    for size in (500, 0):
        page = await read_page(history.stub, session_id="many", page_size=size)
        assert len(page.entries) == 200 and page.entries[-1].uuid == "u449"
    pages = await read_all(history.stub, "many", OLDEST, 500)
    assert [len(p) for p in pages] == [200, 200, 50]


async def test_ambiguous_and_escaping_sessions(history: HistoryHarness) -> None:
    history.transcript("twin", "a").write_bytes(line(type="user", uuid="x"))
    history.transcript("twin", "b").write_bytes(line(type="user", uuid="y"))
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="twin")),
        grpc.StatusCode.FAILED_PRECONDITION,
        history.tmp,
    )
    outside = history.tmp / "outside.jsonl"
    outside.write_bytes(line(type="user", uuid="secret"))
    os.symlink(outside, history.transcript("escape"))
    await expect_error(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="escape")),
        grpc.StatusCode.NOT_FOUND,
        history.tmp,
    )
    listed = await history.stub.ListSessions(pb.ListSessionsRequest())
    assert "escape" not in {s.session_id for s in listed.sessions}


async def test_identical_concurrent_reads_agree(history: HistoryHarness) -> None:
    history.transcript("shared").write_bytes(
        b"".join(line(type="user", uuid=f"u{n}", pad="y" * 20_000) for n in range(200))
    )
    core = history.server.core
    scans, joined = core.reader.scans, core.window_lane.joined
    request = pb.ReadWindowRequest(session_id="shared")
    results = await asyncio.gather(*(collect(history.stub.ReadWindow(request)) for _ in range(8)))
    pages = [page for _, page in results]
    assert all([e.json for e in p.entries] == [e.json for e in pages[0].entries] for p in pages)
    # Each read scanned once, or took the answer of an identical one queued on the lane.
    assert core.reader.scans - scans + core.window_lane.joined - joined == 8


async def test_list_sessions(history: HistoryHarness) -> None:
    history.transcript("first", "p1").write_bytes(
        line(
            type="user",
            uuid="a",
            message={"role": "user", "content": "<command-name>x</command-name>"},
        )
        + line(type="user", uuid="b", message={"role": "user", "content": "Fix the   login bug"})
    )
    history.transcript("second", "p1").write_bytes(
        line(type="summary", summary="A summary title", leafUuid="z")
        + line(type="user", uuid="c", message={"content": "prompt"})
    )
    sub = history.root / "p2" / "first" / "subagents"
    sub.mkdir(parents=True)
    (sub / "agent-1.jsonl").write_bytes(line(type="user", uuid="d", message={"content": "sub"}))
    (sub / "agent-1.meta.json").write_bytes(b"{}")
    deadline = asyncio.get_running_loop().time() + 10
    while len((await history.stub.ListSessions(pb.ListSessionsRequest())).sessions) < 3:
        # the root's listing is cached briefly: poll until it shows the new files
        assert asyncio.get_running_loop().time() < deadline, "the new sessions never listed"
        await asyncio.sleep(0.02)
    seen = {}
    token = ""
    while True:
        response = await history.stub.ListSessions(
            pb.ListSessionsRequest(page_size=1, page_token=token)
        )
        for session in response.sessions:
            assert session.session_id not in seen
            seen[session.session_id] = session
        token = response.next_page_token
        if not token:
            break
    assert set(seen) == {"first", "second", "agent-1"}
    assert seen["first"].title == "Fix the login bug" and seen["second"].title == "A summary title"
    assert seen["agent-1"].is_subagent and seen["agent-1"].parent_session_id == "first"
    assert seen["first"].size_bytes == history.transcript("first", "p1").stat().st_size
    only = await history.stub.ListSessions(pb.ListSessionsRequest(project_dir="p2"))
    assert [s.session_id for s in only.sessions] == ["agent-1"]
    await expect_error(
        history.stub.ListSessions(pb.ListSessionsRequest(page_token="bad")),
        grpc.StatusCode.INVALID_ARGUMENT,
        history.tmp,
    )
    await expect_error(
        history.stub.ListSessions(pb.ListSessionsRequest(page_size=-2)),
        grpc.StatusCode.INVALID_ARGUMENT,
        history.tmp,
    )


async def test_page_token_refused_after_a_same_size_rewrite_at_its_offset(
    history: HistoryHarness,
) -> None:
    # docs/contract.md §11: a page token is tied to the bytes at its own offset,
    # so a rewrite keeping the size and the first 4 KiB is still seen.
    path = history.transcript("same")

    def transcript(pad: str, changed: range) -> bytes:
        return b"".join(
            line(type="user", uuid=f"u{n:03}", pad=(pad if n in changed else "x") * 60)
            for n in range(300)
        )

    original = transcript("x", range(0))
    for direction, changed in ((OLDEST, range(100, 102)), (LATEST, range(198, 200))):
        path.write_bytes(original)
        first = await read_page(history.stub, session_id="same", direction=direction, page_size=100)
        token = first.end.next_page_token
        boundary = first.entries[-1 if direction == OLDEST else 0].byte_offset
        assert boundary > 4096 and token
        # untouched, the token still serves
        await read_page(history.stub, session_id="same", direction=direction, page_token=token)
        rewritten = transcript("y", changed)
        assert len(rewritten) == len(original) and rewritten[:4096] == original[:4096]
        path.write_bytes(rewritten)
        await expect_error(
            history.stub.ReadWindow(
                pb.ReadWindowRequest(session_id="same", direction=direction, page_token=token)
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
            history.tmp,
        )
