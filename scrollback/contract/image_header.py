"""An image's format and pixel size from its first bytes only (a bounded header read).

Shared by the history service (`scrollback images`, `scrollback slim`'s
stand-in texts), which must not import the media service. Pillow opens lazily:
`Image.open` reads the header and decodes no pixel, so a bomb costs nothing
here. Only the first `HEADER_BYTES` are ever given to it.
"""

from __future__ import annotations

import io
import warnings
from typing import NamedTuple

from PIL import Image

# Enough for the header of PNG, GIF and WebP, and of JPEGs with large EXIF blocks.
HEADER_BYTES = 256 * 1024
# The formats whose header is read, and the media type each is.
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


class ImageHeader(NamedTuple):
    """What an image's header says: its media type and pixel size."""

    media_type: str
    width: int
    height: int


def read_header(head: bytes) -> ImageHeader | None:
    """The header of an image whose first bytes are `head`; None if not a PNG, JPEG, GIF or WebP."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(head[:HEADER_BYTES]), formats=list(MEDIA_TYPES)) as image:
                return ImageHeader(MEDIA_TYPES[image.format or ""], image.width, image.height)
    except (OSError, ValueError, SyntaxError, EOFError, KeyError, Image.DecompressionBombError):
        return None
