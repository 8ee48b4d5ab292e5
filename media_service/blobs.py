"""The content-addressed blob store (docs/contract.md §8): bytes on disk, metadata in a store.

Uploads are hashed while written into a temp file on the same filesystem,
size-limited, fsynced, renamed into `<state>/blobs/ab/cd/<sha256>` (and the
directory fsynced), and only then recorded, in the same write transaction as
the rename. Reads hash the whole file before a byte is served; a blob whose
bytes no longer match its digest is DATA_LOSS and moved to quarantine.

An upload holds an exclusive `flock` on its temp file from creation until the
file is published or discarded. Start-up cleanup removes only temp files it
can lock itself: with several media replicas sharing the blobs volume, a
replica that starts never deletes another live replica's upload in progress.

All of this is blocking I/O: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from media_service.blob_paths import BlobPaths
from media_service.errors import (
    BlobMismatchError,
    BlobTooLargeError,
    CorruptMediaError,
    InvalidRequestError,
    MediaNotFoundError,
    StorageFullError,
)
from media_service.lru import LruCache
from media_service.store.base import BlobMetadataStore, BlobRow
from scrollback.contract.image_header import header_dimensions
from scrollback.contract.refs import BLOB_REF_PREFIX, validate_sha256
from scrollback.contract.sniff import SNIFF_BYTES, sniff
from scrollback.principals import Principal
from scrollback.server import metrics

log = logging.getLogger(__name__)

HASH_BLOCK = 1024 * 1024
MAX_MEDIA_TYPE_LENGTH = 255
MAX_FIND_MISSING = 10_000
# Blobs whose width and height are remembered (content-addressed: never stale).
DIMENSION_CACHE_ENTRIES = 4096

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class MediaInfo:
    """What is known of a medium before its bytes (the proto's MediaMetadata)."""

    content_type: str
    declared_media_type: str
    size_bytes: int
    sha256: str
    safe_inline: bool
    pin: str = ""
    # Of the image these bytes are, from its header (0: not a decodable image).
    width: int = 0
    height: int = 0
    # For a thumbnail: its size (0 for an original), the original's sha256, and
    # whether it is the still of an animation.
    thumbnail_size: int = 0
    source_sha256: str = ""
    still_of_animation: bool = False


@dataclass(frozen=True, slots=True)
class WrittenBlob:
    """The outcome of one upload."""

    ref: str
    size_bytes: int
    already_existed: bool


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _storage_error(error: OSError) -> Exception:
    # EFBIG: a file-size limit (RLIMIT_FSIZE, filesystem maximum) is a size bound too.
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StorageFullError()
    return error


class BlobUpload:
    """One upload in progress: feed it chunks, then `finish()` or `abort()`."""

    def __init__(
        self,
        store: BlobStore,
        principal: Principal | None,
        sha256: str,
        size_bytes: int,
        media_type: str,
    ) -> None:
        validate_sha256(sha256)
        if size_bytes < 0:
            raise InvalidRequestError("header size_bytes must not be negative")
        if size_bytes > store.max_blob_size:
            raise BlobTooLargeError()
        if len(media_type) > MAX_MEDIA_TYPE_LENGTH:
            raise InvalidRequestError("header media_type is longer than 255 characters")
        self._store = store
        self.sha256 = sha256
        self.size_bytes = size_bytes
        self.media_type = media_type
        self._hash = hashlib.sha256()
        self._written = 0
        # The uploader owns the blob (docs/contract.md §8); no owner without auth.
        self._owner = None if principal is None else principal.name
        self._temp = store.paths.new_temp()
        self._file: BinaryIO | None = None
        try:
            self._file = open(self._temp, "xb")  # noqa: SIM115 - closed in finish/abort
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            self.abort()
            raise _storage_error(error) from None

    def write(self, data: bytes) -> None:
        """Append and hash one chunk; refuse more bytes than declared or allowed."""
        assert self._file is not None
        if self._written + len(data) > self._store.max_blob_size:
            self.abort()
            raise BlobTooLargeError()
        if self._written + len(data) > self.size_bytes:
            self.abort()
            raise BlobMismatchError("more bytes than the declared size")
        try:
            self._file.write(data)
        except OSError as error:
            self.abort()
            raise _storage_error(error) from None
        self._hash.update(data)
        self._written += len(data)

    def finish(self) -> WrittenBlob:
        """Verify size and digest, fsync, publish and record; leave nothing on failure."""
        assert self._file is not None
        if self._written != self.size_bytes:
            self.abort()
            raise BlobMismatchError("fewer bytes than the declared size")
        if self._hash.hexdigest() != self.sha256:
            self.abort()
            raise BlobMismatchError("the bytes do not match the declared sha256")
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            target = self._store.paths.blob(self.sha256)

            moved: list[bool] = []

            def publish() -> None:
                # Run again when the database lost the connection mid-transaction.
                if moved and target.exists():
                    return
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(self._temp, target)
                _fsync_dir(target.parent)
                moved.append(True)

            row = BlobRow(self.sha256, self.size_bytes, self.media_type, self._store.clock())
            existed = self._store.metadata.publish(row, publish, self._owner)
            # Closed (and unlocked) only once published: start-up cleanup never takes it.
            self._file.close()
            self._file = None
        except OSError as error:
            self.abort()
            raise _storage_error(error) from None
        except BaseException:
            self.abort()
            raise
        return WrittenBlob(f"{BLOB_REF_PREFIX}{self.sha256}", self.size_bytes, existed)

    def abort(self) -> None:
        """Close and remove the temp file (idempotent)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._temp)


class BlobStore:
    """Blob bytes on disk plus their metadata store."""

    def __init__(
        self,
        paths: BlobPaths,
        metadata: BlobMetadataStore,
        *,
        max_blob_size: int,
        clock: Clock = time.time,
    ) -> None:
        self.paths = paths
        self.metadata = metadata
        self.max_blob_size = max_blob_size
        self.clock = clock
        self._dimensions = LruCache[str, tuple[int, int]](DIMENSION_CACHE_ENTRIES)
        paths.ensure_dirs()

    def remove_stale_temps(self) -> int:
        """Remove temp files left by uploads that never finished (at start-up).

        A temp file some process still holds locked is an upload in progress
        (another replica's, on a shared volume) and is left alone.
        """
        removed = 0
        for temp in self.paths.temp_files():
            try:
                fd = os.open(temp, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            try:
                os.unlink(temp)
                removed += 1
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return removed

    def begin_upload(
        self, principal: Principal | None, sha256: str, size_bytes: int, media_type: str
    ) -> BlobUpload:
        """Start an upload from its header; `principal` (None without auth) will own the blob."""
        return BlobUpload(self, principal, sha256, size_bytes, media_type)

    def write_bytes(
        self, principal: Principal | None, data: bytes, media_type: str = ""
    ) -> WrittenBlob:
        """Store bytes in one call (tests, tools), owned by `principal`."""
        upload = self.begin_upload(
            principal, hashlib.sha256(data).hexdigest(), len(data), media_type
        )
        upload.write(data)
        return upload.finish()

    def find_missing(self, digests: Sequence[str]) -> list[str]:
        """The digests the store does not have (no row, or no file), in the order asked."""
        if len(digests) > MAX_FIND_MISSING:
            raise InvalidRequestError(f"at most {MAX_FIND_MISSING} digests per call")
        for digest in digests:
            validate_sha256(digest)
        rows = self.metadata.existing(digests)
        present = {d for d in rows if self.paths.blob(d).is_file()}
        return [d for d in digests if d not in present]

    def _open(self, sha256: str) -> tuple[BlobRow, BinaryIO]:
        row = self.metadata.get(sha256)
        if row is None:
            raise MediaNotFoundError()
        try:
            handle = open(self.paths.blob(sha256), "rb")  # noqa: SIM115 - returned to the caller
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise MediaNotFoundError() from None
        return row, handle

    def _info(self, row: BlobRow, head: bytes, handle: BinaryIO) -> MediaInfo:
        sniffed = sniff(head)
        width, height = 0, 0
        if sniffed.safe_inline:
            dimensions = self._dimensions.get(row.sha256)
            if dimensions is None:
                # The fixed header fields only: a bounded prefix, never the whole blob.
                handle.seek(0)
                dimensions = header_dimensions(handle) or (0, 0)
                handle.seek(0)
                self._dimensions.put(row.sha256, dimensions)
            width, height = dimensions
        return MediaInfo(
            content_type=sniffed.content_type,
            declared_media_type=row.media_type,
            size_bytes=row.size_bytes,
            sha256=row.sha256,
            safe_inline=sniffed.safe_inline,
            width=width,
            height=height,
        )

    def stat(self, sha256: str) -> MediaInfo:
        """Metadata without hashing: row, file present with the recorded size, sniffed head."""
        row, handle = self._open(sha256)
        with handle:
            stat = os.fstat(handle.fileno())
            if stat.st_size != row.size_bytes:
                self._quarantine(sha256, stat.st_ino)
                raise CorruptMediaError()
            head = handle.read(SNIFF_BYTES)
            return self._info(row, head, handle)

    def open_verified(self, sha256: str) -> tuple[MediaInfo, BinaryIO]:
        """Hash the whole blob; return its metadata and an open file at offset 0.

        A blob whose size or digest no longer matches is quarantined and
        CorruptMediaError is raised: its bytes are never served.
        """
        row, handle = self._open(sha256)
        try:
            digest = hashlib.sha256()
            size = 0
            head = b""
            while block := handle.read(HASH_BLOCK):
                if not head:
                    head = block[:SNIFF_BYTES]
                digest.update(block)
                size += len(block)
            if size != row.size_bytes or digest.hexdigest() != sha256:
                inode = os.fstat(handle.fileno()).st_ino
                handle.close()
                self._quarantine(sha256, inode)
                raise CorruptMediaError()
            info = self._info(row, head, handle)
            handle.seek(0)
        except BaseException:
            handle.close()
            raise
        return info, handle

    def read_verified(self, sha256: str) -> tuple[MediaInfo, bytes]:
        """The whole verified blob in memory (hydration of small attachments)."""
        info, handle = self.open_verified(sha256)
        with handle:
            return info, handle.read()

    def _quarantine(self, sha256: str, inode: int) -> None:
        """Move the corrupt file away, unless a fresh upload already replaced it."""
        source = self.paths.blob(sha256)
        try:
            if os.stat(source).st_ino != inode:
                return
            os.replace(source, self.paths.quarantine(sha256, self.clock()))
            metrics.BLOB_VERIFY_FAILURES.inc()
            log.error("blob %s is corrupt: moved to quarantine", sha256)
        except FileNotFoundError:
            pass
