"""Thumbnails (docs/contract.md §13), with libvips (pyvips); no gRPC here.

Thumbnails come in a fixed set of sizes (`THUMBNAIL_SIZES`, the longest side
in pixels): a fixed set keeps the cache to one file per medium and size. They
are WebP, never larger than the original (an image already within the size is
re-encoded at its own size), and an animated GIF or WebP gives a still of its
first frame, marked `still_of_animation`.

Decoding is bounded. The dimensions come from the image's fixed header
(scrollback.contract.image_header) and are checked against `max_pixels`
before a single pixel is decoded; a larger image (a decompression bomb: a few
bytes claiming huge dimensions) is ThumbnailTooLargeError and nothing is
allocated for it. Only PNG, JPEG, GIF and WebP headers pass that check; the
decode itself is scrollback.imaging's `shrink_on_load` (the loader and frame
checks, shrinking while decoding; an image it refuses is NotAnImageError).
The worker-wide memory budget that encodes reserve before decoding is
media_service.thumbnail_encodes' (over scrollback.server.decode_budget).

Sources are read through scrollback.imaging's `buffered` files, so a
transcript image is decoded slice by slice from its file (the extraction
PayloadReader) and a blob from its open file, never held whole by this module.

`ThumbnailCache` keeps thumbnails under the blob store, keyed by (sha256 of
the original, size), at the paths `BlobPaths.thumbnail` builds. Files are
written to a temp file and renamed into place, so a reader never sees half a
thumbnail. Each cache hit refreshes the file's mtime: GC (media_service/gc.py)
removes a thumbnail with its blob, and removes a thumbnail whose original is
no blob (a transcript image, or a blob already gone) once it has not been
used for the grace period.

Everything here blocks and is CPU-bound: the servicer runs it on its own
bounded executor, apart from the threads that serve reads.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from media_service.blob_paths import BlobPaths
from media_service.errors import NotAnImageError, ThumbnailTooLargeError
from scrollback.contract.image_header import read_header
from scrollback.imaging import UndecodableImageError, shrink_on_load

if TYPE_CHECKING:
    import pyvips

THUMBNAIL_SIZES = (96, 320, 960)
THUMBNAIL_CONTENT_TYPE = "image/webp"
# 64 megapixels: any real photo or screenshot (an 8K frame is 33 MP).
DEFAULT_MAX_PIXELS = 64_000_000
WEBP_QUALITY = 80
# libvips' WebP encoder effort: 4 is its default balance of speed and size.
WEBP_EFFORT = 4


@dataclass(frozen=True, slots=True)
class Thumbnail:
    """One encoded thumbnail."""

    data: bytes
    width: int
    height: int
    still_of_animation: bool


def make_thumbnail(stream: IO[bytes], longest: int, *, max_pixels: int) -> Thumbnail:
    """A WebP of at most `longest` px on its longest side (the first frame of an animation).

    ThumbnailTooLargeError before decoding when the image has more than
    `max_pixels`; NotAnImageError when the bytes are not a decodable image.
    """
    if longest not in THUMBNAIL_SIZES:
        raise ValueError("not a thumbnail size")
    header = read_header(stream)
    if header is None:
        raise NotAnImageError()
    if header.pixels > max_pixels:
        raise ThumbnailTooLargeError()

    def encode(frame: pyvips.Image) -> Thumbnail:
        animated = frame.get_typeof("n-pages") != 0 and int(frame.get("n-pages")) > 1
        data = frame.webpsave_buffer(Q=WEBP_QUALITY, effort=WEBP_EFFORT, keep="none")
        return Thumbnail(data, frame.width, frame.height, animated)

    try:
        return shrink_on_load(stream, header.pixels, longest, encode)
    except UndecodableImageError:
        raise NotAnImageError() from None


@dataclass(frozen=True, slots=True)
class CachedThumbnail:
    """A thumbnail read back from the cache."""

    data: bytes
    still_of_animation: bool


class ThumbnailCache:
    """Thumbnails on disk under the blob store, keyed by (original sha256, size)."""

    def __init__(self, paths: BlobPaths) -> None:
        self._paths = paths
        # Encodes done (a cache miss each): tests and metrics read it.
        self.encodes = 0
        self._lock = threading.Lock()

    def count_encode(self) -> None:
        """Record one encode."""
        with self._lock:
            self.encodes += 1

    def get(self, sha256: str, size: int) -> CachedThumbnail | None:
        """The cached thumbnail, its use recorded (mtime); None on a miss."""
        for still in (False, True):
            path = self._paths.thumbnail(sha256, size, still=still)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            with contextlib.suppress(OSError):
                os.utime(path)  # a use: GC keeps thumbnails used within the grace period
            return CachedThumbnail(data, still)
        return None

    def put(self, sha256: str, size: int, thumbnail: Thumbnail) -> None:
        """Store a thumbnail: a temp file renamed into place (concurrent writers both win)."""
        target = self._paths.thumbnail(sha256, size, still=thumbnail.still_of_animation)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = self._paths.new_temp()
        try:
            with open(temp, "xb") as handle:
                handle.write(thumbnail.data)
            os.replace(temp, target)
        except OSError:
            # A cache: a thumbnail that cannot be stored is still served.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def remove(self, sha256: str) -> int:
        """Remove every thumbnail of one original; the number removed."""
        removed = 0
        for path in self._paths.thumbnails_of(sha256):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed += 1
        with contextlib.suppress(OSError):
            self._paths.thumbnail_dir(sha256).rmdir()
        return removed

    def originals(self) -> Iterator[tuple[str, list[Path]]]:
        """(original sha256, its thumbnail files) for every original with thumbnails."""
        return self._paths.thumbnail_sets()
