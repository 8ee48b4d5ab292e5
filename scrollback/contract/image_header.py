"""Width and height of an image from its fixed header fields, reading a bounded prefix only.

PNG: the IHDR chunk, which the format puts first. GIF: the logical screen
descriptor. WebP: the VP8, VP8L or VP8X header in the first chunk. Each of
these lies in the first 30 bytes, so nothing after them is read: whatever
chunks follow (however many) cost nothing. JPEG: the first SOFn segment,
found by stepping from segment header to segment header (their payloads are
skipped, not read) within the first `JPEG_PREFIX_BYTES`; a JPEG whose frame
header lies further in has no dimensions here.

`header_dimensions` never decodes a pixel and never reads more than the
bounded prefix; it answers None for bytes that are none of these formats or
whose header is malformed. Both services use it (the media service for
metadata and before a thumbnail, the history service for `scrollback images`
and `slim`), so it lives in the contract code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

# The fixed headers of PNG, GIF and WebP all end by byte 30.
FIXED_HEADER_BYTES = 32
# Real photos put SOFn after their APPn metadata (EXIF, ICC profiles, XMP): a few hundred KiB.
JPEG_PREFIX_BYTES = 4 * 1024 * 1024
# The SOFn markers that carry a frame header (C4, C8 and CC are DHT, JPG and DAC).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM and the restart markers.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_JPEG_END_OF_HEADERS = frozenset({0xD9, 0xDA})  # EOI, SOS: no frame header before them
# The formats read, and the media type each is.
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """The format (PNG, JPEG, GIF or WEBP) and the dimensions its header states."""

    format: str
    width: int
    height: int

    @property
    def media_type(self) -> str:
        """The media type of the format, e.g. "image/png"."""
        return MEDIA_TYPES[self.format]

    @property
    def pixels(self) -> int:
        """Width times height."""
        return self.width * self.height


def read_header(stream: IO[bytes]) -> ImageHeader | None:
    """The header of the image in `stream` (read from its start), or None."""
    stream.seek(0)
    head = stream.read(FIXED_HEADER_BYTES)
    found = _fixed(head) if not head.startswith(b"\xff\xd8\xff") else _jpeg(stream)
    if found is None or found.width <= 0 or found.height <= 0:
        return None
    return found


def header_dimensions(stream: IO[bytes]) -> tuple[int, int] | None:
    """(width, height) from the image's header, or None if it is no PNG, JPEG, GIF or WebP."""
    found = read_header(stream)
    return None if found is None else (found.width, found.height)


def _fixed(head: bytes) -> ImageHeader | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(head) < 24 or head[12:16] != b"IHDR":
            return None
        return ImageHeader(
            "PNG", int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        )
    if head.startswith((b"GIF87a", b"GIF89a")):
        if len(head) < 10:
            return None
        return ImageHeader(
            "GIF", int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
        )
    if len(head) >= 30 and head[0:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    return None


def _webp(head: bytes) -> ImageHeader | None:
    kind = head[12:16]
    if kind == b"VP8 ":
        # After the frame tag (3 bytes) and the start code 9d 01 2a: 14-bit width, height.
        if head[23:26] != b"\x9d\x01\x2a":
            return None
        width = int.from_bytes(head[26:28], "little") & 0x3FFF
        height = int.from_bytes(head[28:30], "little") & 0x3FFF
        return ImageHeader("WEBP", width, height)
    if kind == b"VP8L":
        if head[20] != 0x2F:
            return None
        bits = int.from_bytes(head[21:25], "little")
        return ImageHeader("WEBP", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if kind == b"VP8X":
        # The canvas size, 24 bits each, minus one.
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return ImageHeader("WEBP", width, height)
    return None


def _jpeg(stream: IO[bytes]) -> ImageHeader | None:
    position = 2
    while position < JPEG_PREFIX_BYTES:
        stream.seek(position)
        header = stream.read(4)
        if len(header) < 2 or header[0] != 0xFF:
            return None
        marker = header[1]
        if marker == 0xFF:  # a fill byte before the marker
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        if marker in _JPEG_END_OF_HEADERS or len(header) < 4:
            return None
        length = int.from_bytes(header[2:4], "big")
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            # Sample precision, then the number of lines (height) and of samples per line.
            fields = stream.read(5)
            if len(fields) < 5 or length < 7:
                return None
            return ImageHeader(
                "JPEG", int.from_bytes(fields[3:5], "big"), int.from_bytes(fields[1:3], "big")
            )
        position += 2 + length
    return None
