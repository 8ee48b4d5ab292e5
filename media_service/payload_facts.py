"""What a transcript image's payload is: its sha256, size, sniffed type and dimensions.

An image found in a verified line (`Found`: its payload's absolute offsets in
the file) is never held whole. Its facts come from one streaming decode pass
(`payload_info`: the sha256 and size of the decoded bytes, the sniffed type
from their first bytes), and, for a type safe to show inline, its dimensions
from the fixed header fields only (scrollback.contract.image_header), decoded
slice by slice from the file. Nothing here decodes a pixel: a plain read never
touches the image decoders (scrollback.imaging) that thumbnails use.

`payload_reader` gives the reader of the decoded bytes that reads serve from.
Blocking I/O: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from media_service.blobs import MediaInfo
from media_service.errors import CorruptMediaError
from scrollback.contract.extraction import (
    ImageNotStrippedError,
    LocatedImage,
    PayloadReader,
    RawReader,
    UndecodablePayloadError,
    iter_decoded,
)
from scrollback.contract.image_header import header_dimensions
from scrollback.contract.seekable import buffered
from scrollback.contract.sniff import SNIFF_BYTES, sniff
from scrollback.linefile import ByteSource, LineFile

# The payload is looked at for a backslash in reads of this size.
_BACKSLASH_BLOCK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Found:
    """Image `located` of a line, with its payload's absolute offsets in the file."""

    located: LocatedImage
    raw_start: int
    raw_end: int
    escaped: bool


def file_reader(fd: ByteSource) -> RawReader:
    """`read(offset, length)` of the transcript's raw bytes."""

    def read(offset: int, length: int) -> bytes:
        return LineFile(fd).read(length, offset)

    return read


def has_backslash(fd: ByteSource, start: int, end: int) -> bool:
    """True if [start, end) of the file holds a backslash (the payload's text is escaped)."""
    position = start
    while position < end:
        block = LineFile(fd).read(min(_BACKSLASH_BLOCK, end - position), position)
        if not block:
            return False
        if b"\\" in block:
            return True
        position += len(block)
    return False


def payload_reader(fd: ByteSource, found: Found) -> PayloadReader:
    """A reader of the image's decoded bytes, decoding slice by slice from the file."""
    return PayloadReader(
        file_reader(fd),
        found.raw_start,
        found.raw_end,
        escaped=found.escaped,
        index=found.located.index,
    )


def payload_info(fd: ByteSource, found: Found) -> MediaInfo:
    """The decoded bytes' metadata, from one streaming pass over them.

    CorruptMediaError for a payload that is not base64, or that changed
    between the pass and the header's read.
    """
    located = found.located
    digest = hashlib.sha256()
    head = b""
    size = 0
    try:
        for piece in iter_decoded(file_reader(fd), found.raw_start, found.raw_end, located.index):
            digest.update(piece)
            if len(head) < SNIFF_BYTES:
                head += piece[: SNIFF_BYTES - len(head)]
            size += len(piece)
    except UndecodablePayloadError:
        raise CorruptMediaError("the transcript's payload is not valid base64") from None
    sniffed = sniff(head)
    width, height = 0, 0
    if sniffed.safe_inline:
        # The fixed header fields only, decoded slice by slice from the file.
        reader = payload_reader(fd, found)
        try:
            width, height = header_dimensions(buffered(reader.read, size)) or (0, 0)
        except (UndecodablePayloadError, ImageNotStrippedError):
            raise CorruptMediaError("the transcript's payload changed while read") from None
    return MediaInfo(
        content_type=sniffed.content_type,
        declared_media_type=located.declared_media_type,
        size_bytes=size,
        sha256=digest.hexdigest(),
        safe_inline=sniffed.safe_inline,
        pin=located.pin,
        width=width,
        height=height,
    )
