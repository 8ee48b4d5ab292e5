"""Helpers for the media integration tests: transcripts, images, refs and calls."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from media_service.config import MediaConfig
from media_service.server import RunningMediaServer
from scrollback.contract.enumeration import image_source_field, iter_image_blocks
from scrollback.contract.stripping import strip_line
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench.thumbnails import flat_png, png_chunk
from tests.support.reasons import assert_reason

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_bytes(size: int = 40_000, seed: int = 0) -> bytes:
    """Bytes that sniff as PNG, `size` long, distinct per seed."""
    body = (
        os.urandom(size - len(PNG_MAGIC))
        if seed < 0
        else bytes((i * 31 + seed * 7) % 251 for i in range(size - len(PNG_MAGIC)))
    )
    return PNG_MAGIC + body


def png_with_empty_chunks(
    width: int, height: int, chunks: int, *, before_idat: bool = True, seed: int = 0
) -> bytes:
    """A real one-colour PNG with `chunks` empty private ancillary chunks between IHDR and
    IDAT (or, `before_idat` false, between IDAT and IEND, where a reader stops before)."""
    png = flat_png(width, height, (9, 99, seed % 256, 255))
    # After the signature and IHDR (length, type, 13 bytes of data, CRC); or before IEND.
    at = 8 + 12 + 13 if before_idat else len(png) - 12
    return png[:at] + png_chunk(b"scRb", b"") * chunks + png[at:]


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    """An image content block carrying `data` as base64."""
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": media_type,
            "data": base64.b64encode(data).decode(),
        },
    }


def entry(uuid: str | None, content: list[Any], **extra: Any) -> dict[str, Any]:
    """A user entry with `content` as message.content."""
    value: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": content}}
    if uuid is not None:
        value["uuid"] = uuid
    value.update(extra)
    return value


def dumps(value: dict[str, Any], *, spaced: bool = False) -> bytes:
    """One JSON line, compact (as Claude Code writes) or spaced."""
    if spaced:
        return json.dumps(value).encode()
    return json.dumps(value, separators=(",", ":")).encode()


def write_transcript(
    root: Path, session_id: str, lines: list[bytes], project: str = "proj"
) -> Path:
    """Write `<root>/<project>/<session_id>.jsonl`."""
    folder = root / project
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def expected_images(line: bytes) -> list[bytes | None]:
    """The decoded bytes of each image of a line by the enumeration rule (None if no data)."""
    parsed = json.loads(line)
    found: list[bytes | None] = []
    for block in iter_image_blocks(parsed):
        data = image_source_field(block, "data")
        found.append(base64.b64decode(data) if isinstance(data, str) and data else None)
    return found


def mint(session_id: str, line: bytes) -> list[ref_pb2.MediaRef]:
    """The refs the history service would mint for a line (same strip_line)."""
    stripped = strip_line(line)
    assert stripped is not None
    return [
        ref_pb2.MediaRef(
            session_id=session_id, entry_uuid=stripped.uuid, index=image.index, pin=image.pin
        )
        for image in stripped.images
    ]


def transcript_selector(
    session_id: str, entry_uuid: str, index: int, pin: str
) -> media_pb2.MediaSelector:
    """A selector for a transcript image."""
    return media_pb2.MediaSelector(
        media_ref=ref_pb2.MediaRef(
            session_id=session_id, entry_uuid=entry_uuid, index=index, pin=pin
        )
    )


async def read_media(
    stub: media_pb2_grpc.MediaServiceAsyncStub,
    selector: media_pb2.MediaSelector,
    read_offset: int = 0,
    read_limit: int = 0,
    deadline_seconds: float | None = None,
    chunk_size: int = 0,
) -> tuple[media_pb2.MediaMetadata, bytes, list[int]]:
    """Metadata, the bytes and the chunk sizes of one ReadMedia call."""
    call = stub.ReadMedia(
        media_pb2.ReadMediaRequest(
            media=selector, read_offset=read_offset, read_limit=read_limit, chunk_size=chunk_size
        ),
        timeout=deadline_seconds,
    )
    metadata: media_pb2.MediaMetadata | None = None
    chunks: list[bytes] = []
    async for message in call:
        if message.WhichOneof("item") == "metadata":
            assert metadata is None and not chunks, "metadata must come first, once"
            metadata = message.metadata
        else:
            assert metadata is not None
            chunks.append(message.data)
    assert metadata is not None
    return metadata, b"".join(chunks), [len(c) for c in chunks]


async def read_error(
    stub: media_pb2_grpc.MediaServiceAsyncStub,
    selector: media_pb2.MediaSelector,
    read_offset: int = 0,
    read_limit: int = 0,
) -> grpc.aio.AioRpcError:
    """The error of a ReadMedia call that must fail before sending any data.

    Like every error, it carries an ErrorInfo whose reason agrees with its status code.
    """
    try:
        await read_media(stub, selector, read_offset, read_limit)
    except grpc.aio.AioRpcError as error:
        assert_reason(error)
        return error
    raise AssertionError("ReadMedia succeeded")


@dataclass
class MediaEnv:
    """A running media server and where its files live."""

    root: Path
    state: Path
    server: RunningMediaServer
    channel: grpc.aio.Channel
    stub: media_pb2_grpc.MediaServiceAsyncStub
    config: MediaConfig


StartMedia = Callable[..., Awaitable[MediaEnv]]
