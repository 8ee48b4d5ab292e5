"""The media library: one facade over transcript images and blobs (no gRPC here).

A selector names either a transcript image (ref + pin) or a blob (sha256);
`stat` gives its metadata, `open` its metadata plus a reader of its verified
bytes. Everything here blocks: the servicer runs it in a thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from media_service.blobs import BlobStore, MediaInfo
from media_service.transcript_media import TranscriptMedia
from scrollback.contract.refs import BlobRef, TranscriptImageRef


@dataclass(frozen=True, slots=True)
class TranscriptSelector:
    """A transcript image, with the pin it was minted with."""

    ref: TranscriptImageRef
    pin: str


Selector = TranscriptSelector | BlobRef


class OpenMedia:
    """A medium's metadata and a reader of its (already verified) bytes."""

    def __init__(
        self,
        info: MediaInfo,
        read: Callable[[int, int], bytes],
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.info = info
        self._read = read
        self._close = close

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
        return cls(info, lambda offset, length: bytes(view[offset : offset + length]))

    @classmethod
    def of_file(cls, info: MediaInfo, handle: BinaryIO) -> OpenMedia:
        """A medium read from an open file."""
        fd = handle.fileno()
        return cls(info, lambda offset, length: os.pread(fd, length, offset), handle.close)


class MediaLibrary:
    """Transcript images and blobs behind one interface."""

    def __init__(self, transcripts: TranscriptMedia, blobs: BlobStore) -> None:
        self.transcripts = transcripts
        self.blobs = blobs

    def stat(self, selector: Selector) -> MediaInfo:
        """Metadata only (a transcript image is still decoded to hash it)."""
        if isinstance(selector, TranscriptSelector):
            info, _ = self.transcripts.read(selector.ref, selector.pin)
            return info
        return self.blobs.stat(selector.sha256)

    def open(self, selector: Selector) -> OpenMedia:
        """Metadata and verified bytes, ready to stream."""
        if isinstance(selector, TranscriptSelector):
            info, data = self.transcripts.read(selector.ref, selector.pin)
            return OpenMedia.of_bytes(info, data)
        info, handle = self.blobs.open_verified(selector.sha256)
        return OpenMedia.of_file(info, handle)
