"""One image's exact bytes and pin from one line (the media service's side).

It runs the same `strip_line` (and so the same enumeration) that minted the
reference, at the smallest inline limit a history request may use, so every
image that any history request could have cut is found at the same index with
the same pin. Only the one payload asked for is decoded.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pybase64

from scrollback.contract.payload_scan import first_not_base64, is_payload
from scrollback.contract.reading import ByteReader
from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    StrippedImage,
    StrippedLine,
    strip_line,
)


class ImageNotFoundError(LookupError):
    """No payload behind that index: past the images, a failed upload, or no such line."""


class ImageNotStrippedError(LookupError):
    """The index names an image whose data is not a cut payload (the line changed)."""


class UndecodablePayloadError(ValueError):
    """The payload is base64 characters but not valid base64."""


_ESCAPE = re.compile(rb"\\(?:/|u00([0-9a-fA-F]{2}))")


def _unescape(match: re.Match[bytes]) -> bytes:
    hex_digits = match.group(1)
    return b"/" if hex_digits is None else bytes([int(hex_digits, 16)])


@dataclass(frozen=True, slots=True)
class LocatedImage:
    """Where image `index` of a line is and what its pin is."""

    index: int
    pin: str
    declared_media_type: str
    raw_start: int
    raw_end: int


def strip_for_extraction(line: bytes) -> StrippedLine | None:
    """Strip a line the way the extractor does: at the smallest inline limit, never stubbed.

    Long string values are cut without checking their characters: only the
    one payload asked for is checked, by `decode_image`, whose validating
    decode is that check. Image indexes do not depend on which strings were
    cut, so they are the ones the history service minted.
    """
    return strip_line(
        line, inline_limit=MIN_INLINE_LIMIT, max_line_size=len(line) + 1, validate_payloads=False
    )


def locate_in_stripped(stripped: StrippedLine | None, index: int) -> LocatedImage:
    """Find image `index` in a line already stripped by `strip_for_extraction`."""
    if stripped is None or index >= stripped.image_count or index in stripped.failed_image_indexes:
        raise ImageNotFoundError(index)
    found: StrippedImage | None = next((i for i in stripped.images if i.index == index), None)
    if found is None:
        raise ImageNotStrippedError(index)
    return LocatedImage(
        found.index, found.pin, found.declared_media_type, found.raw_start, found.raw_end
    )


def locate_image(line: bytes, index: int) -> LocatedImage:
    """Find image `index` of a line by the shared rule; raise if it has no payload."""
    return locate_in_stripped(strip_for_extraction(line), index)


def decode_image(line: bytes, located: LocatedImage) -> bytes:
    """Decode the located payload into the image's exact bytes.

    ImageNotStrippedError when the located string is not base64 characters
    (no ref was ever minted for it); UndecodablePayloadError when it is, but
    is not valid base64.
    """
    raw = memoryview(line)[located.raw_start : located.raw_end]
    if line.find(b"\\", located.raw_start, located.raw_end) >= 0:
        raw = memoryview(_ESCAPE.sub(_unescape, raw.tobytes()))
    try:
        decoded: bytes = pybase64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as error:
        if not is_payload(line, located.raw_start, located.raw_end):
            # Not base64 characters: the history service never cut it.
            raise ImageNotStrippedError(located.index) from error
        raise UndecodablePayloadError(located.index) from error
    return decoded


def extract_image(line: bytes, index: int) -> tuple[bytes, LocatedImage]:
    """The exact decoded bytes of image `index` of a line, and where it was found."""
    located = locate_image(line, index)
    return decode_image(line, located), located


# The name the media service reads payloads by (an absolute file offset; fewer bytes only at EOF).
RawReader = ByteReader
# Raw text decoded per step: a multiple of 4, so each slice decodes on its own.
DECODE_SLICE = 256 * 1024


def _decode_piece(text: bytes, index: int) -> bytes:
    """Decode 4-aligned base64 text; the errors `decode_image` raises."""
    try:
        decoded: bytes = pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        if first_not_base64(text) >= 0:
            raise ImageNotStrippedError(index) from error
        raise UndecodablePayloadError(index) from error
    return decoded


def iter_decoded(
    read: ByteReader, start: int, end: int, index: int = -1, slice_bytes: int = DECODE_SLICE
) -> Iterator[bytes]:
    """The decoded bytes of the payload whose raw text is at [start, end), slice by slice.

    Never holds more than one slice: escapes (`\\/`, `\\u00XX`) are undone per
    slice, an escape cut by a slice's end is carried to the next, and base64
    is decoded in 4-aligned runs. The bytes equal `decode_image`'s, and so do
    the errors (a short read is UndecodablePayloadError).
    """
    carry = b""  # raw text held back: a possibly cut escape
    pending = b""  # base64 characters short of a 4-aligned run
    position = start
    while position < end:
        data = read(position, min(slice_bytes, end - position))
        if not data:
            raise UndecodablePayloadError(index)
        position += len(data)
        text = carry + data if carry else data
        cut = len(text)
        if position < end:
            backslash = text.rfind(b"\\", max(0, cut - 5))
            if backslash >= 0:
                cut = backslash
        piece, carry = text[:cut], text[cut:]
        if b"\\" in piece:
            piece = _ESCAPE.sub(_unescape, piece)
        if pending:
            piece = pending + piece
        aligned = len(piece) - len(piece) % 4
        pending = piece[aligned:]
        if aligned:
            yield _decode_piece(piece[:aligned], index)
    if carry:
        piece = pending + _ESCAPE.sub(_unescape, carry)
        aligned = len(piece) - len(piece) % 4
        if aligned:
            yield _decode_piece(piece[:aligned], index)
        pending = piece[aligned:]
    if pending:
        yield _decode_piece(pending, index)  # not a whole quartet: the same error as whole


class PayloadReader:
    """Random reads of a payload's decoded bytes, straight from its file.

    A payload without escapes maps decoded offset d to raw offset 4 * (d // 3),
    so a read decodes just the quartets it covers. One with escapes is
    decoded forward from its start (a read behind the last one starts over).
    Memory is one slice, whatever the image's size.
    """

    def __init__(
        self, read: ByteReader, start: int, end: int, *, escaped: bool, index: int
    ) -> None:
        self._read = read
        self._start = start
        self._end = end
        self._escaped = escaped
        self._index = index
        self._stream: Iterator[bytes] | None = None
        self._held = b""  # decoded bytes from `_held_at`
        self._held_at = 0

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` decoded bytes from `offset` (fewer at the end)."""
        if length <= 0:
            return b""
        if not self._escaped:
            quartet = offset // 3
            raw_from = self._start + quartet * 4
            raw_to = min(self._end, self._start + -(-(offset + length) // 3) * 4)
            if raw_from >= raw_to:
                return b""
            data = self._read(raw_from, raw_to - raw_from)
            if len(data) != raw_to - raw_from:
                raise UndecodablePayloadError(self._index)
            skip = offset - quartet * 3
            return _decode_piece(data, self._index)[skip : skip + length]
        if self._stream is None or offset < self._held_at:
            self._stream = iter_decoded(self._read, self._start, self._end, self._index)
            self._held, self._held_at = b"", 0
        out = bytearray()
        while len(out) < length:
            held_end = self._held_at + len(self._held)
            if offset + len(out) >= held_end:
                piece = next(self._stream, None)
                if piece is None:
                    break
                self._held, self._held_at = piece, held_end
                continue
            at = offset + len(out) - self._held_at
            out += self._held[at : at + length - len(out)]
        return bytes(out)
