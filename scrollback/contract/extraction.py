"""One image's exact bytes and pin from one line (the media service's side).

It runs the same `strip_line` (and so the same enumeration) that minted the
reference, at the smallest inline limit a history request may use, so every
image that any history request could have cut is found at the same index with
the same pin. Only the one payload asked for is decoded.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass

import pybase64

from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    StrippedImage,
    StrippedLine,
    is_payload,
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
