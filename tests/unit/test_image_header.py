"""Unit tests of media_service.image_header: dimensions from fixed header fields, read from a
bounded prefix (a file that counts the bytes read shows nothing after the header is read)."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from scrollback.contract.image_header import (
    FIXED_HEADER_BYTES,
    JPEG_PREFIX_BYTES,
    header_dimensions,
    read_header,
)
from tests.support.media import png_with_empty_chunks


class CountingFile(io.BytesIO):
    """Bytes in memory that count what is read from them."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data


def encoded(fmt: str, mode: str, size: tuple[int, int], **options: object) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size).save(out, fmt, **options)
    return out.getvalue()


@pytest.mark.parametrize(
    ("fmt", "mode", "options", "expected"),
    [
        ("PNG", "RGBA", {}, "PNG"),
        ("PNG", "P", {"transparency": 0}, "PNG"),
        ("JPEG", "RGB", {}, "JPEG"),
        ("JPEG", "RGB", {"progressive": True}, "JPEG"),
        ("GIF", "P", {}, "GIF"),
        ("WEBP", "RGB", {}, "WEBP"),  # VP8
        ("WEBP", "RGB", {"lossless": True}, "WEBP"),  # VP8L
        ("WEBP", "RGBA", {}, "WEBP"),  # VP8X (alpha)
    ],
)
def test_each_format_gives_its_dimensions(
    fmt: str, mode: str, options: dict[str, object], expected: str
) -> None:
    data = encoded(fmt, mode, (1234, 567), **options)
    header = read_header(io.BytesIO(data))
    assert header is not None
    assert (header.format, header.width, header.height) == (expected, 1234, 567)
    assert header.media_type == "image/" + expected.lower()


def test_a_png_is_read_no_further_than_its_fixed_header() -> None:
    data = png_with_empty_chunks(640, 480, 400_000)
    stream = CountingFile(data)
    assert header_dimensions(stream) == (640, 480)
    assert stream.bytes_read <= FIXED_HEADER_BYTES


def test_a_jpeg_skips_segment_payloads_to_its_frame_header() -> None:
    # A 200 KB ICC profile (APP2 segments) before the frame header: their payloads are skipped.
    data = encoded("JPEG", "RGB", (300, 200), icc_profile=b"p" * 200_000)
    stream = CountingFile(data)
    assert header_dimensions(stream) == (300, 200)
    assert stream.bytes_read < 200


def test_a_jpeg_frame_header_beyond_the_prefix_is_not_searched_for() -> None:
    # Comment segments (COM, 64 KiB each) past the prefix bound, then a frame header.
    comment = b"\xff\xfe" + struct.pack(">H", 0xFFFF) + b"c" * (0xFFFF - 2)
    count = JPEG_PREFIX_BYTES // len(comment) + 2
    frame = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, 200, 300, 1) + b"\x01\x11\x00"
    data = b"\xff\xd8" + comment * count + frame + b"\xff\xd9"
    stream = CountingFile(data)
    assert header_dimensions(stream) is None
    assert stream.bytes_read <= FIXED_HEADER_BYTES + 4 * count
    # The same frame header within the prefix is found.
    assert header_dimensions(io.BytesIO(b"\xff\xd8" + comment * 3 + frame)) == (300, 200)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"just some text",
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDX" + b"\x00" * 20,  # not IHDR
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + b"\x00" * 17,  # 0 x 0
        b"GIF89a\x01",  # cut short
        b"\xff\xd8\xff\xda\x00\x02",  # a scan before any frame header
        b"\xff\xd8\xff\xe0\x00\x01",  # a segment length under 2
        b"RIFF\x00\x00\x00\x00WEBPVP8 " + b"\x00" * 14,  # no VP8 start code
    ],
)
def test_malformed_or_unknown_headers_have_no_dimensions(data: bytes) -> None:
    assert header_dimensions(io.BytesIO(data)) is None
