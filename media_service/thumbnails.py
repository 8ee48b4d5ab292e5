"""Image dimensions and thumbnails (docs/contract.md §13), with Pillow; no gRPC here.

Thumbnails come in a fixed set of sizes (`THUMBNAIL_SIZES`, the longest side
in pixels): a fixed set keeps the cache to one file per medium and size. They
are WebP, never larger than the original (an image already within the size is
re-encoded at its own size), and an animated GIF or WebP gives a still of its
first frame, marked `still_of_animation`.

Decoding is bounded: Pillow opens lazily (it reads the header only), so the
pixel count is checked against `max_pixels` before a single pixel is
decoded; a larger image (a decompression bomb: a few bytes claiming huge
dimensions) is ThumbnailTooLargeError and nothing is allocated for it.
`image_dimensions` reads the width and height from the header the same way.

Sources are read through `ReaderStream`, a seekable file over a
`read(offset, length)` function, so a transcript image is decoded slice by
slice from its file (the extraction PayloadReader) and a blob from its open
file, never held whole by this module.

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
import io
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from PIL import Image, ImageOps

from media_service.blob_paths import BlobPaths
from media_service.errors import NotAnImageError, ThumbnailTooLargeError

THUMBNAIL_SIZES = (96, 320, 960)
THUMBNAIL_CONTENT_TYPE = "image/webp"
# The only decoders Pillow may run: the photo formats transcripts carry. Others
# (EPS, which runs Ghostscript, and many rarely fuzzed ones) are never tried.
DECODED_FORMATS = ("PNG", "JPEG", "GIF", "WEBP")
# 64 megapixels: any real photo or screenshot (an 8K frame is 33 MP); one
# decoded RGBA frame at the limit is 256 MiB, which the bounded executor
# caps at `threads` frames at once.
DEFAULT_MAX_PIXELS = 64_000_000
WEBP_QUALITY = 80
# Pillow's WebP encoder method: 4 is its default balance of speed and size.
WEBP_METHOD = 4
# Pillow reads its source through a buffer of this size.
READ_BUFFER = 64 * 1024


class ReaderStream(io.RawIOBase):
    """A read-only, seekable file over `read(offset, length)` of `size` bytes."""

    def __init__(self, read: Callable[[int, int], bytes], size: int) -> None:
        super().__init__()
        self._read = read
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self._size - self._position)
        if wanted <= 0:
            return 0
        data = self._read(self._position, wanted)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


@dataclass(frozen=True, slots=True)
class Thumbnail:
    """One encoded thumbnail."""

    data: bytes
    width: int
    height: int
    still_of_animation: bool


def _open(stream: IO[bytes]) -> Image.Image:
    """Pillow's lazy open (header only).

    NotAnImageError for bytes it cannot identify; ThumbnailTooLargeError when
    Pillow itself refuses the header's dimensions as a bomb.
    """
    try:
        with warnings.catch_warnings():
            # Our own, lower pixel limit applies; Pillow's warning is noise here.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(stream, formats=DECODED_FORMATS)
    except Image.DecompressionBombError:
        raise ThumbnailTooLargeError() from None
    except (OSError, ValueError, SyntaxError, EOFError):
        raise NotAnImageError() from None


def buffered(read: Callable[[int, int], bytes], size: int) -> IO[bytes]:
    """A buffered, seekable file over `read(offset, length)`, for Pillow."""
    return io.BufferedReader(ReaderStream(read, size), buffer_size=READ_BUFFER)


def image_dimensions(stream: IO[bytes]) -> tuple[int, int] | None:
    """(width, height) from the image's header only; None if not an image Pillow knows."""
    try:
        with _open(stream) as image:
            return image.width, image.height
    except (NotAnImageError, ThumbnailTooLargeError):
        return None


def make_thumbnail(stream: IO[bytes], longest: int, *, max_pixels: int) -> Thumbnail:
    """A WebP of at most `longest` px on its longest side (the first frame of an animation).

    ThumbnailTooLargeError before decoding when the image has more than
    `max_pixels`; NotAnImageError when the bytes are not a decodable image.
    """
    if longest not in THUMBNAIL_SIZES:
        raise ValueError("not a thumbnail size")
    with _open(stream) as image:
        if image.width * image.height > max_pixels:
            raise ThumbnailTooLargeError()
        animated = bool(getattr(image, "is_animated", False))
        try:
            # JPEG decodes at a reduced scale directly (much less work and memory).
            image.draft("RGB", (longest, longest))
            image.seek(0)
            frame = ImageOps.exif_transpose(image)
            frame.thumbnail((longest, longest), Image.Resampling.LANCZOS)
            if frame.mode not in ("RGB", "RGBA"):
                frame = frame.convert("RGBA" if _has_alpha(frame) else "RGB")
            out = io.BytesIO()
            frame.save(out, "WEBP", quality=WEBP_QUALITY, method=WEBP_METHOD)
        except Image.DecompressionBombError:
            raise ThumbnailTooLargeError() from None
        except (OSError, ValueError, SyntaxError, EOFError):
            raise NotAnImageError() from None
        return Thumbnail(out.getvalue(), frame.width, frame.height, animated)


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("LA", "PA", "La") or "transparency" in image.info


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
