"""The media service's domain errors and ERROR_TABLE, the reason (and so the status code) of each.

Every message is fixed text: never a path, a token or a payload. Lookups that
fail for any reason a caller may not tell apart (unknown session, entry or
index, failed upload) share one message.
"""

from __future__ import annotations

from collections.abc import Mapping

from scrollback.contract.reasons import Reason
from scrollback.contract.refs import RefError
from scrollback.objects import TranscriptsUnavailableError
from scrollback.state.errors import StoreBusyError
from scrollback.transcripts import AmbiguousSessionError

NOT_FOUND_MESSAGE = "media not found"


class MediaNotFoundError(LookupError):
    """Unknown session, entry, index or blob, or a failed upload: one answer for all."""

    def __init__(self) -> None:
        super().__init__(NOT_FOUND_MESSAGE)


class PinMismatchError(Exception):
    """The transcript no longer holds the payload the ref was minted for."""

    def __init__(self) -> None:
        super().__init__("the transcript changed since the reference was minted (pin mismatch)")


class LineTooLargeError(Exception):
    """The entry's line is over the max line size; it is never loaded."""

    def __init__(self) -> None:
        super().__init__("the entry's line is over the max line size")


class InvalidRequestError(ValueError):
    """A malformed request (the message says which part, never echoing it)."""


class ReadRangeError(Exception):
    """read_offset / read_limit outside the medium (google.bytestream rules)."""


class BlobTooLargeError(Exception):
    """An upload over the max blob size."""

    def __init__(self) -> None:
        super().__init__("blob is over the max blob size")


class BlobMismatchError(ValueError):
    """The uploaded bytes do not match the declared sha256 or size."""


class StorageFullError(Exception):
    """The disk holding the state dir is full."""

    def __init__(self) -> None:
        super().__init__("no space left to store the blob")


class CorruptMediaError(Exception):
    """Stored bytes that do not match their digest, or an undecodable payload."""

    def __init__(self, message: str = "stored media is corrupt") -> None:
        super().__init__(message)


class SearchCancelledError(Exception):
    """A search stopped because its caller left or its deadline passed."""

    def __init__(self) -> None:
        super().__init__("the request was cancelled or its deadline passed")


class ThumbnailTooLargeError(Exception):
    """An image with more pixels than the thumbnailer decodes (a decompression bomb)."""

    def __init__(self) -> None:
        super().__init__("the image has too many pixels to make a thumbnail")


class NotAnImageError(Exception):
    """A thumbnail asked of bytes that are not an image the server can decode."""

    def __init__(self) -> None:
        super().__init__("the medium is not an image a thumbnail can be made of")


class UploadIdleError(Exception):
    """A WriteBlob client stopped sending for longer than the idle timeout."""


class UploadDeadlineError(Exception):
    """A WriteBlob upload took longer than the overall upload deadline."""


# The one map from domain exceptions to reasons (docs/contract.md §9), applied to every
# RPC and to StatMedia's per-item errors.
ERROR_TABLE: Mapping[type[BaseException], Reason] = {
    RefError: Reason.REF_INVALID,
    InvalidRequestError: Reason.INVALID_ARGUMENT,
    BlobMismatchError: Reason.BLOB_MISMATCH,
    MediaNotFoundError: Reason.MEDIA_NOT_FOUND,
    PinMismatchError: Reason.PIN_MISMATCH,
    AmbiguousSessionError: Reason.SESSION_AMBIGUOUS,
    ReadRangeError: Reason.RANGE_NOT_SATISFIABLE,
    LineTooLargeError: Reason.LINE_TOO_LARGE,
    ThumbnailTooLargeError: Reason.IMAGE_TOO_LARGE,
    NotAnImageError: Reason.NOT_AN_IMAGE,
    BlobTooLargeError: Reason.BLOB_TOO_LARGE,
    StorageFullError: Reason.STORAGE_FULL,
    CorruptMediaError: Reason.MEDIA_CORRUPT,
    StoreBusyError: Reason.STORE_BUSY,
    TranscriptsUnavailableError: Reason.TRANSCRIPTS_UNAVAILABLE,
    UploadIdleError: Reason.UPLOAD_IDLE,
    UploadDeadlineError: Reason.UPLOAD_DEADLINE,
    SearchCancelledError: Reason.LOOKUP_CANCELLED,
}
