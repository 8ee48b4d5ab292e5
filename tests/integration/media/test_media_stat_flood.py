"""StatMedia under floods (issue 11 item 7, docs/contract.md §11): many selectors into
one transcript resolve in one pass, searches never hold the threads that serve
reads, and a search stops once its caller's deadline passes."""

from __future__ import annotations

import asyncio
import os

import grpc

from media_service.transcript_media import TranscriptMedia
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from tests.support.media import (
    MediaEnv,
    dumps,
    entry,
    expected_images,
    image_block,
    mint,
    png_bytes,
    read_media,
    write_transcript,
)

PIN = "0" * 32


def big_lines(count: int = 16) -> list[bytes]:
    """About `count` MB of image lines (random payloads), small lines between them."""
    lines: list[bytes] = []
    for number in range(count):
        lines.append(dumps(entry(f"img-{number}", [image_block(png_bytes(750_000, -1))])))
        lines.append(dumps(entry(f"txt-{number}", [{"type": "text", "text": "hello"}])))
    return lines


def unknown(session_id: str, count: int, tag: str) -> list[media_pb2.MediaSelector]:
    return [
        media_pb2.MediaSelector(
            media_ref=ref_pb2.MediaRef(
                session_id=session_id, entry_uuid=f"nobody-{tag}-{n}", index=0, pin=PIN
            )
        )
        for n in range(count)
    ]


def transcripts_of(media: MediaEnv) -> TranscriptMedia:
    assert media.server.library is not None
    return media.server.library.transcripts


async def test_many_selectors_into_one_transcript_are_one_pass(media: MediaEnv) -> None:
    lines = big_lines()
    write_transcript(media.root, "big", lines)
    known = [
        media_pb2.MediaSelector(media_ref=ref)
        for line in (lines[0], lines[30])
        for ref in mint("big", line)
    ]
    transcripts = transcripts_of(media)
    before = transcripts.search_passes
    selectors = [*unknown("big", 300, "a"), *known, *unknown("big", 10, "b")]
    answer = await media.stub.StatMedia(media_pb2.StatMediaRequest(media=selectors))
    assert transcripts.search_passes - before == 1
    codes = [r.error.code for r in answer.results]
    assert codes == ["NOT_FOUND"] * 300 + ["", ""] + ["NOT_FOUND"] * 10
    for selector, result in zip(known, answer.results[300:302], strict=True):
        metadata, data, _ = await read_media(media.stub, selector)
        assert result.metadata == metadata
    assert data == expected_images(lines[30])[0]


async def test_reads_answer_promptly_while_stat_floods_run(media: MediaEnv) -> None:
    write_transcript(media.root, "big", big_lines())
    small = dumps(entry("u-small", [image_block(png_bytes(40_000, 3))]))
    write_transcript(media.root, "small", [small])
    (ref,) = mint("small", small)
    transcripts = transcripts_of(media)
    searched = transcripts.search_slices
    floods = [
        asyncio.ensure_future(
            media.stub.StatMedia(
                media_pb2.StatMediaRequest(media=unknown("big", 300, str(n))), timeout=60
            )
        )
        for n in range(6)
    ]
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while transcripts.search_slices == searched:  # until the floods are searching
            assert asyncio.get_running_loop().time() < deadline, "no flood started searching"
            await asyncio.sleep(0.001)
        # Before the fix the read waited behind every search: DEADLINE_EXCEEDED here.
        _, data, _ = await read_media(
            media.stub, media_pb2.MediaSelector(media_ref=ref), deadline_seconds=5
        )
        assert data == expected_images(small)[0]
        answers = await asyncio.gather(*floods)
        assert all(r.error.code == "NOT_FOUND" for a in answers for r in a.results)
    finally:
        for flood in floods:
            flood.cancel()


async def test_a_search_stops_when_its_deadline_passes(media: MediaEnv) -> None:
    project = media.root / "links"
    first = write_transcript(media.root, "l000", big_lines(), project="links")
    for number in range(1, 400):
        os.link(first, project / f"l{number:03}.jsonl")
    # one selector per session: one pass each, far more work than the deadline allows
    selectors = [s for number in range(400) for s in unknown(f"l{number:03}", 1, "d")]
    transcripts = transcripts_of(media)
    try:
        await media.stub.StatMedia(media_pb2.StatMediaRequest(media=selectors), timeout=0.5)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    else:
        raise AssertionError("400 passes over 16 MB finished within 0.5 s")
    await asyncio.sleep(0.5)  # time for a search that would go on past the deadline to show
    settled = transcripts.search_slices
    await asyncio.sleep(1.0)  # a quiet second is the behaviour under test
    assert transcripts.search_slices == settled, "the search went on after the deadline"
    assert transcripts.search_passes < 400
