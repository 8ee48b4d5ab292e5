"""The media library: one facade over transcript images and blobs (no gRPC here).

A selector names either a transcript image (ref + pin) or a blob (sha256);
`stat` gives its metadata, `open` its metadata plus a reader of its verified
bytes. Everything here blocks: the servicer runs it in a thread.

With auth, a `media:<sha256>` blob is readable only by a principal that
uploaded it or can see an accepted message referencing it (its session's
project is visible, or it accepted the message itself): a known hash is not a
key. Others get the same NOT_FOUND as for a blob that does not exist, and
FindMissingBlobs reports such blobs as missing (re-uploading them makes the
caller an owner). The rule is scrollback.state.blob_access's, the one the
history service applies to attachments.

Thumbnails (`thumbnail`) pass the same checks as the original first: a
caller who may not read a medium cannot read its thumbnail either. A cached
thumbnail is answered at once; otherwise a `ThumbnailJob` holds the opened
original, and the caller runs it (CPU-bound: on its own bounded executor).
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import BinaryIO

from media_service.blobs import BlobStore, MediaInfo
from media_service.decoded import DecodedKey
from media_service.errors import CorruptMediaError, MediaNotFoundError, NotAnImageError
from media_service.thumbnails import (
    DEFAULT_MAX_PIXELS,
    THUMBNAIL_CONTENT_TYPE,
    THUMBNAIL_SIZES,
    ThumbnailCache,
    make_thumbnail,
)
from media_service.transcript_media import TranscriptMedia
from scrollback.contract.extraction import (
    ImageNotStrippedError,
    PayloadReader,
    UndecodablePayloadError,
)
from scrollback.contract.image_header import header_dimensions
from scrollback.contract.refs import BlobRef, TranscriptImageRef
from scrollback.imaging import buffered
from scrollback.linefile import LocalSource
from scrollback.principals import Principal
from scrollback.state.blob_access import readable_blobs
from scrollback.transcripts import TranscriptSource


@dataclass(frozen=True, slots=True)
class TranscriptSelector:
    """A transcript image, with the pin it was minted with.

    `line_offset_hint` is where the history service saw the entry's line
    (None: no hint); it only ever saves a search, never changes an answer.
    """

    ref: TranscriptImageRef
    pin: str
    line_offset_hint: int | None = None


Selector = TranscriptSelector | BlobRef


class OpenMedia:
    """A medium's metadata and a reader of its (already verified) bytes."""

    def __init__(
        self,
        info: MediaInfo,
        read: Callable[[int, int], bytes],
        close: Callable[[], None] = lambda: None,
        data: bytes | None = None,
        *,
        decoded_key: DecodedKey | None = None,
        fresh_reads: Callable[[], Callable[[int, int], bytes]] | None = None,
    ) -> None:
        self.info = info
        self._read = read
        self._close = close
        # The whole medium when it is held in memory: served without more reads.
        self.data = data
        # A transcript image's key in the decoded cache (media_service.decoded).
        self.decoded_key = decoded_key
        self._fresh_reads = fresh_reads
        # Where its blocking reads run: None, the default threads (a local file or
        # memory); media_service.instance gives a bucket's reads their own pool.
        self.read_executor: Executor | None = None

    def restart_reads(self) -> None:
        """Start the reads over: a verified reader hashes only reads in order from 0."""
        if self._fresh_reads is not None:
            self._read = self._fresh_reads()

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset`."""
        return self._read(offset, length)

    def close(self) -> None:
        """Release the medium's file, if any."""
        self._close()

    @classmethod
    def of_bytes(cls, info: MediaInfo, data: bytes) -> OpenMedia:
        """A medium held in memory."""
        view = memoryview(data)
        return cls(info, lambda offset, length: bytes(view[offset : offset + length]), data=data)

    @classmethod
    def of_file(cls, info: MediaInfo, handle: BinaryIO) -> OpenMedia:
        """A medium read from an open local file (a blob)."""
        source = LocalSource(handle.fileno())  # borrowed: the handle closes it
        return cls(info, lambda offset, length: source.read(length, offset), handle.close)


def _verified_reads(info: MediaInfo, reader: PayloadReader) -> Callable[[int, int], bytes]:
    """Reads of a transcript image decoded from its file, checked as they go.

    Whole-image reads in order are hashed on the way: if the bytes no longer
    match the metadata sent first (the line was rewritten in place), the
    last read raises CorruptMediaError instead of ending the stream cleanly.
    """
    digest = hashlib.sha256()
    hashed = 0

    def read(offset: int, length: int) -> bytes:
        nonlocal hashed
        try:
            data = reader.read(offset, length)
        except (UndecodablePayloadError, ImageNotStrippedError):
            raise CorruptMediaError("the transcript's payload changed while read") from None
        if offset == hashed:
            digest.update(data)
            hashed += len(data)
            if hashed >= info.size_bytes and (
                hashed != info.size_bytes or digest.hexdigest() != info.sha256
            ):
                raise CorruptMediaError("the transcript's payload changed while read")
        return data

    return read


def thumbnail_info(
    original: MediaInfo, size: int, data: bytes, *, still_of_animation: bool
) -> MediaInfo:
    """The metadata of a thumbnail's bytes, made from `original` at `size`."""
    width, height = header_dimensions(io.BytesIO(data)) or (0, 0)
    return MediaInfo(
        content_type=THUMBNAIL_CONTENT_TYPE,
        declared_media_type=original.declared_media_type,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        safe_inline=True,
        pin=original.pin,
        width=width,
        height=height,
        thumbnail_size=size,
        source_sha256=original.sha256,
        still_of_animation=still_of_animation,
    )


class ThumbnailJob:
    """Encoding one thumbnail from an opened original (CPU-bound; run it off the loop)."""

    def __init__(self, library: MediaLibrary, source: OpenMedia, size: int) -> None:
        self._library = library
        self.source = source
        self.size = size

    def run(self) -> OpenMedia:
        """Decode (bounded), encode, cache; the thumbnail in memory. Closes the original."""
        original = self.source.info
        try:
            stream = buffered(self.source.read, original.size_bytes)
            thumbnail = make_thumbnail(
                stream, self.size, max_pixels=self._library.max_thumbnail_pixels
            )
        finally:
            self.source.close()
        cache = self._library.thumbnails
        cache.count_encode()
        cache.put(original.sha256, self.size, thumbnail)
        info = thumbnail_info(
            original, self.size, thumbnail.data, still_of_animation=thumbnail.still_of_animation
        )
        return OpenMedia.of_bytes(info, thumbnail.data)

    def close(self) -> None:
        """Release the original without encoding (the caller left)."""
        self.source.close()


class MediaLibrary:
    """Transcript images and blobs behind one interface."""

    def __init__(
        self,
        transcripts: TranscriptMedia,
        blobs: BlobStore,
        root: TranscriptSource | None = None,
        *,
        max_thumbnail_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        self.transcripts = transcripts
        self.blobs = blobs
        self._root = root
        self.thumbnails = ThumbnailCache(blobs.paths)
        self.max_thumbnail_pixels = max_thumbnail_pixels

    def _session_visible(self, principal: Principal | None, session_id: str) -> bool:
        if self._root is None:
            return False
        try:
            self._root.resolve(session_id, principal)
        except LookupError:
            return False
        except ValueError:
            return False
        return True

    def blob_visible(self, principal: Principal | None, sha256: str) -> bool:
        """True if `principal` may read this blob (always, without auth)."""
        return sha256 in readable_blobs(
            self.blobs.metadata,
            principal,
            [sha256],
            functools.partial(self._session_visible, principal),
        )

    def _check_blob(self, principal: Principal | None, sha256: str) -> None:
        if not self.blob_visible(principal, sha256):
            raise MediaNotFoundError()

    def find_missing(self, principal: Principal | None, digests: list[str]) -> list[str]:
        """The digests the store lacks or `principal` may not read, in the order asked."""
        missing = self.blobs.find_missing(digests)
        if principal is None:
            return missing
        absent = set(missing)
        present = [d for d in digests if d not in absent]
        readable = readable_blobs(
            self.blobs.metadata,
            principal,
            present,
            functools.partial(self._session_visible, principal),
        )
        return [d for d in digests if d in absent or d not in readable]

    def stat(self, principal: Principal | None, selector: Selector) -> MediaInfo:
        """Metadata only (a transcript image is still found and pin-checked)."""
        if isinstance(selector, TranscriptSelector):
            return self.transcripts.stat(
                principal, selector.ref, selector.pin, selector.line_offset_hint
            )
        self._check_blob(principal, selector.sha256)
        return self.blobs.stat(selector.sha256)

    def stat_many(
        self,
        principal: Principal | None,
        selectors: Sequence[Selector],
        should_stop: Callable[[], bool],
    ) -> list[MediaInfo | Exception]:
        """`stat` of each selector in order, each failure its own error.

        Transcript images are resolved together, one pass per transcript
        (`TranscriptMedia.stat_many`); SearchCancelledError once `should_stop()`.
        """
        results: list[MediaInfo | Exception | None] = [None] * len(selectors)
        images: list[int] = []
        for number, selector in enumerate(selectors):
            if isinstance(selector, TranscriptSelector):
                images.append(number)
                continue
            try:
                results[number] = self.stat(principal, selector)
            except Exception as error:
                results[number] = error
        found = self.transcripts.stat_many(
            principal,
            [
                (chosen.ref, chosen.pin, chosen.line_offset_hint)
                for chosen in (selectors[number] for number in images)
                if isinstance(chosen, TranscriptSelector)
            ],
            should_stop,
        )
        for number, result in zip(images, found, strict=True):
            results[number] = result
        return [r if r is not None else MediaNotFoundError() for r in results]

    def open(self, principal: Principal | None, selector: Selector) -> OpenMedia:
        """Metadata and verified bytes, ready to stream, as `principal` may read them."""
        if isinstance(selector, TranscriptSelector):
            opened = self.transcripts.open_payload(
                principal, selector.ref, selector.pin, selector.line_offset_hint
            )
            info, reader = opened.info, opened.reader
            return OpenMedia(
                info,
                _verified_reads(info, reader),
                opened.handle.close,
                decoded_key=opened.key,
                fresh_reads=lambda: _verified_reads(info, reader),
            )
        self._check_blob(principal, selector.sha256)
        info, handle = self.blobs.open_verified(selector.sha256)
        return OpenMedia.of_file(info, handle)

    def thumbnail(
        self, principal: Principal | None, selector: Selector, size: int
    ) -> OpenMedia | ThumbnailJob:
        """The cached thumbnail of a medium at `size`, or the job that makes it.

        The original passes every check of `open` first (visibility, pin, the
        blob's owner), so a thumbnail is NOT_FOUND exactly when the original
        is. NotAnImageError for a medium that is not an image content type.
        A cached thumbnail of a blob is served without hashing the blob.
        """
        if size not in THUMBNAIL_SIZES:
            raise ValueError("not a thumbnail size")
        source: OpenMedia | None = None
        if isinstance(selector, TranscriptSelector):
            source = self.open(principal, selector)
            info = source.info
        else:
            self._check_blob(principal, selector.sha256)
            info = self.blobs.stat(selector.sha256)
        try:
            if not info.safe_inline:
                raise NotAnImageError()
            cached = self.thumbnails.get(info.sha256, size)
            if cached is not None:
                made = thumbnail_info(
                    info, size, cached.data, still_of_animation=cached.still_of_animation
                )
                return OpenMedia.of_bytes(made, cached.data)
            if source is None:
                source = self.open(principal, selector)  # hashed whole before it is decoded
        except BaseException:
            if source is not None:
                source.close()
            raise
        return ThumbnailJob(self, source, size)
