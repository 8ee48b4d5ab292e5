"""Decoding untrusted images with libvips (pyvips), shrunk while they decode.

Both services decode images from transcripts and uploads: the media service
for thumbnails (media_service.thumbnails), the history service for the
downscales of slim copies (history_service.slim). Each decode goes through
`shrink_on_load`, which bounds it the same way:

- only PNG, JPEG, GIF and WebP are decoded: libvips' own reading of the
  header must name the loader of one of these formats (`DECODED_LOADERS`;
  TIFF, SVG, PDF and the loaders not fuzzed for untrusted input are never
  tried), and its frame must be no larger than the fixed header's
  (scrollback.contract.image_header), which the caller checked against its
  pixel limit and memory budget before calling (a GIF frame larger than its
  logical screen is refused);
- libvips then shrinks while it decodes: JPEG and WebP at a reduced scale in
  the decoder itself, PNG in strips as the rows stream in, so a decode holds
  a few strips and the shrunk frame rather than the whole image (a GIF frame
  is the exception: its decoder renders one whole frame; and the GIF and WebP
  loaders read the whole file into memory first). `decode_cost` is the most
  a decode holds: what it reserves from a decode budget;
- no operation cache (it would hold decoded sources between decodes).

Sources are read through scrollback.contract.seekable's `buffered` files, seekable
files over a `read(offset, length)` function, so an image inside a transcript line is
decoded slice by slice from its file (scrollback.contract.extraction's
PayloadReader), never held whole. How much memory decodes may take at once,
and whose turn it is, is scrollback.server.decode_budget's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

# Re-exported: the decoders' callers build their sources with it.
from scrollback.contract.seekable import buffered as buffered

if TYPE_CHECKING:
    import pyvips

T = TypeVar("T")

# The only loaders libvips may run: the photo formats transcripts carry.
DECODED_LOADERS = frozenset(
    {"pngload_source", "jpegload_source", "gifload_source", "webpload_source"}
)
# A decoded frame is RGBA at most: the bytes a decode holds per pixel.
BYTES_PER_PIXEL = 4
# Formats whose libvips loader reads the whole file into memory before a pixel is decoded.
WHOLE_FILE_MEDIA_TYPES = frozenset({"image/gif", "image/webp"})


def decode_cost(media_type: str, pixels: int, size_bytes: int) -> int:
    """The most a `shrink_on_load` decode holds, what it reserves from a decode budget.

    One decoded RGBA frame of the header's `pixels`, and for GIF and WebP the
    whole file of `size_bytes` besides.
    """
    whole_file = size_bytes if media_type in WHOLE_FILE_MEDIA_TYPES else 0
    return max(1, pixels * BYTES_PER_PIXEL + whole_file)


class UndecodableImageError(ValueError):
    """The bytes are not an image libvips may decode here, or its decoder failed."""


@functools.cache
def libvips() -> Any:
    """pyvips, loaded by the first decode: a process that decodes nothing never maps libvips."""
    import pyvips

    pyvips.cache_set_max(0)
    pyvips.block_untrusted_set(True)
    return pyvips


def vips_source(stream: IO[bytes]) -> pyvips.SourceCustom:
    """A libvips source reading `stream` (seekable) from where it stands."""
    source = libvips().SourceCustom()
    source.on_read(stream.read)
    source.on_seek(stream.seek)
    return source


def shrink_on_load(
    stream: IO[bytes], header_pixels: int, longest: int, use: Callable[[pyvips.Image], T]
) -> T:
    """`use(frame)`: the first frame, shrunk while decoded to at most `longest` px a side.

    `header_pixels` is what the image's fixed header states (already checked
    by the caller); a loader outside DECODED_LOADERS, a frame larger than
    that, or a decoder error (also one raised while `use` saves the frame:
    libvips decodes lazily) is UndecodableImageError.
    """
    vips = libvips()
    try:
        stream.seek(0)
        probe_source = vips_source(stream)
        probe = vips.Image.new_from_source(probe_source, "", access="sequential")
        if probe.get("vips-loader") not in DECODED_LOADERS:
            raise UndecodableImageError("not a PNG, JPEG, GIF or WebP")
        if probe.width * probe.height > header_pixels:
            raise UndecodableImageError("a frame larger than the header states")
        del probe, probe_source
        stream.seek(0)
        # Shrink-on-load, EXIF orientation applied, never enlarged; libvips decodes lazily,
        # so `source` must outlive `use`.
        source = vips_source(stream)
        frame = vips.Image.thumbnail_source(
            source, longest, height=longest, size="down", fail_on="truncated"
        )
        result = use(frame)
        del frame, source
        return result
    except vips.Error:
        raise UndecodableImageError("the decoder failed") from None
