"""Refs minted by a RUNNING history service resolve byte-exact in the media service."""

from __future__ import annotations

import json
import shutil

import grpc
import pytest

from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from tests.integration.media.test_media_transcripts import corpus_files_with_images, generated_lines
from tests.support.media import MediaEnv, expected_images, read_media, write_transcript

history_server = pytest.importorskip("history_service.server")
history_config = pytest.importorskip("history_service.config")
from scrollback.history.v1 import history_pb2, history_pb2_grpc  # noqa: E402


async def minted_refs(
    stub: history_pb2_grpc.HistoryServiceStub, session_id: str
) -> list[tuple[str, ref_pb2.MediaRef]]:
    """(uuid, MediaRef) of every ref of every page of a session, via ReadWindow."""
    refs: list[tuple[str, ref_pb2.MediaRef]] = []
    token = ""
    while True:
        call = stub.ReadWindow(
            history_pb2.ReadWindowRequest(session_id=session_id, page_token=token)
        )
        token = ""
        async for message in call:
            kind = message.WhichOneof("item")
            if kind == "entry":
                refs.extend((message.entry.uuid, ref) for ref in message.entry.media_refs)
            elif kind == "end":
                token = message.end.next_page_token
        if not token:
            return refs


async def test_history_minted_refs_resolve(media: MediaEnv) -> None:
    lines_by_uuid: dict[tuple[str, str], bytes] = {}
    for number, source in enumerate(corpus_files_with_images()):
        target = media.root / "corpus-project" / f"corpus-{number}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        for line in source.read_bytes().splitlines():
            if b'"image"' in line and b'"uuid"' in line:
                lines_by_uuid[(f"corpus-{number}", line_uuid(line))] = line
    lines, _ = generated_lines()
    write_transcript(media.root, "gen", lines)
    for line in lines:
        if b'"uuid"' in line:
            lines_by_uuid[("gen", line_uuid(line))] = line
    config = history_config.HistoryConfig(
        transcripts=media.root, state_dir=media.state, addr="127.0.0.1:0"
    )
    history = await history_server.start_history_server(config)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{history.port}")
    try:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        sessions = sorted({session for session, _ in lines_by_uuid})
        resolved = 0
        for session_id in sessions:
            for entry_uuid, ref in await minted_refs(stub, session_id):
                _, data, _ = await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
                expected = expected_images(lines_by_uuid[(session_id, entry_uuid)])
                assert data == expected[ref.index]
                resolved += 1
        assert resolved >= 11
    finally:
        await channel.close()
        await history.stop(0)


def line_uuid(line: bytes) -> str:
    """The top-level uuid of a line, or empty."""
    value = json.loads(line).get("uuid")
    return value if isinstance(value, str) else ""
