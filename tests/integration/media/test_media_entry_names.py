"""Every API names an entry as ReadWindow does, and each name resolves through ReadMedia.

A line without a usable uuid (none, or one of the offset form `at-<digits>`)
is named by its byte offset (docs/contract.md §4). ReadWindow's refs,
ListImages' refs and the refs slim writes in its stand-in texts must be the
same for every line, and each must read back the image's bytes through a real
media server, with its hint and from its string form alone.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from history_service.config import HistoryConfig
from history_service.server import start_history_server
from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from tests.support.media import (
    MediaEnv,
    dumps,
    entry,
    expected_images,
    image_block,
    png_bytes,
    read_media,
    write_transcript,
)

SESSION = "names"
_STAND_IN_REF = re.compile(r"ref ([^ ]+) pin ([0-9a-f]{32})")


@asynccontextmanager
async def _history(media: MediaEnv) -> AsyncIterator[history_pb2_grpc.HistoryServiceStub]:
    config = HistoryConfig(transcripts=media.root, state_dir=media.state, addr="127.0.0.1:0")
    server = await start_history_server(config)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield history_pb2_grpc.HistoryServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


def _lines() -> list[bytes]:
    """Lines whose uuids are: usable, missing, `at-5`, `at-0` (another line's offset), not an id."""
    picture = [png_bytes(40_000, seed) for seed in range(5)]
    return [
        dumps(entry("root-1", [image_block(picture[0])])),
        dumps(entry(None, [image_block(picture[1])])),
        dumps(entry("at-5", [image_block(picture[2])], parentUuid="root-1")),
        dumps(entry("at-0", [{"type": "text", "text": "x"}, image_block(picture[3])])),
        dumps(entry("not an id", [image_block(picture[4])])),
    ]


def _expected(lines: list[bytes]) -> dict[str, bytes]:
    """uri -> bytes of every image, named by the rule: a usable uuid, else `at-<offset>`."""
    names = ["root-1", "at-{}", "at-{}", "at-{}", "at-{}"]
    expected: dict[str, bytes] = {}
    offset = 0
    for name, line in zip(names, lines, strict=True):
        for index, data in enumerate(expected_images(line)):
            assert data is not None
            expected[f"{SESSION}/{name.format(offset)}/{index}"] = data
        offset += len(line) + 1
    return expected


async def _window_refs(stub: history_pb2_grpc.HistoryServiceStub) -> dict[str, ref_pb2.MediaRef]:
    refs: dict[str, ref_pb2.MediaRef] = {}
    async for message in stub.ReadWindow(history_pb2.ReadWindowRequest(session_id=SESSION)):
        if message.WhichOneof("item") == "entry":
            refs.update((ref.uri, ref) for ref in message.entry.media_refs)
    return refs


async def _listed_refs(stub: history_pb2_grpc.HistoryServiceStub) -> dict[str, ref_pb2.MediaRef]:
    refs: dict[str, ref_pb2.MediaRef] = {}
    async for message in stub.ListImages(history_pb2.ListImagesRequest(session_id=SESSION)):
        if message.HasField("image"):
            assert message.image.HasField("ref"), message.image.line_number
            refs[message.image.ref.uri] = message.image.ref
    return refs


async def _stand_in_refs(stub: history_pb2_grpc.HistoryServiceStub) -> dict[str, str]:
    copy = bytearray()
    async for message in stub.SlimSession(history_pb2.SlimSessionRequest(session_id=SESSION)):
        if message.HasField("data"):
            copy += message.data
    found = _STAND_IN_REF.findall(copy.decode())
    assert len(found) == 5
    return dict(found)


async def _read(media: MediaEnv, uri: str, pin: str, hint: int | None) -> bytes:
    session_id, entry_uuid, index = uri.split("/")
    ref = ref_pb2.MediaRef(session_id=session_id, entry_uuid=entry_uuid, index=int(index), pin=pin)
    if hint is not None:
        ref.line_offset_hint = hint
    _, data, _ = await read_media(media.stub, media_pb2.MediaSelector(media_ref=ref))
    return data


async def test_every_api_names_every_entry_alike_and_each_name_resolves(media: MediaEnv) -> None:
    lines = _lines()
    write_transcript(media.root, SESSION, lines)
    expected = _expected(lines)
    async with _history(media) as stub:
        window = await _window_refs(stub)
        listed = await _listed_refs(stub)
        stand_ins = await _stand_in_refs(stub)
    assert sorted(window) == sorted(listed) == sorted(stand_ins) == sorted(expected)
    for uri, ref in window.items():
        assert listed[uri].pin == stand_ins[uri] == ref.pin
        assert listed[uri].entry_uuid == ref.entry_uuid == uri.split("/")[1]
        assert listed[uri].line_offset_hint == ref.line_offset_hint
        assert await _read(media, uri, ref.pin, ref.line_offset_hint) == expected[uri]
        assert await _read(media, uri, ref.pin, None) == expected[uri]
