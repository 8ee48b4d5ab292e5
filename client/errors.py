"""Typed exceptions of the Scrollback client, one per gRPC status code the services use.

`from_rpc_error(error)` turns a `grpc.RpcError` (sync or `grpc.aio.AioRpcError`)
into the matching `ScrollbackError` subclass, carrying the status code, the
server's message and any rich error details (`google.rpc.Status.details`, read
with `grpc_status.rpc_status.from_call` when the server sent them). Every
error of the services names its cause in a `google.rpc.ErrorInfo` (its
`reason`, `scrollback.contract.reasons.Reason`): the exception is then the
class of that reason (`PinMismatch`, `TranscriptRewritten`, ...), a subclass of
its status code's class. Callers catch `ScrollbackError` for "any failure", a
status class for a kind of failure, or a reason class for one cause:

    try:
        client.read_window("abc")
    except TranscriptRewritten:
        ...  # the page token is stale: start again from the latest window
    except NotFound:
        ...
"""

from __future__ import annotations

from typing import Any, cast

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from scrollback.contract.reasons import DOMAIN, Reason

__all__ = [
    "AlreadyExists",
    "BlobMismatch",
    "BlobMissing",
    "BlobTooLarge",
    "Cancelled",
    "ChainTooLarge",
    "ChatKeyBound",
    "DataLoss",
    "DeadlineExceeded",
    "DelegationNotAllowed",
    "FailedPrecondition",
    "ImageTooLarge",
    "Internal",
    "InvalidArgument",
    "LineTooLarge",
    "LongTailPending",
    "LookupCancelled",
    "MalformedRequest",
    "MediaCorrupt",
    "MediaNotFound",
    "NotAnImage",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "PinMismatch",
    "RangeNotSatisfiable",
    "RefInvalid",
    "ResourceExhausted",
    "ScrollbackError",
    "SessionAmbiguous",
    "SessionNotFound",
    "StorageFull",
    "StoreBusy",
    "StreamStalled",
    "TooLarge",
    "TooManyStreams",
    "TranscriptRewritten",
    "TranscriptsUnavailable",
    "TxnConflict",
    "Unauthenticated",
    "Unavailable",
    "UnknownPrincipal",
    "UploadDeadline",
    "UploadIdle",
    "error_class",
    "from_rpc_error",
    "reason_in",
]


class ScrollbackError(Exception):
    """A failed Scrollback call: `code` (a grpc.StatusCode), `reason`, `message`, `details`."""

    default_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    # The ErrorInfo reason of a reason class; None on the status classes.
    default_reason: Reason | None = None

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        details: tuple[Any, ...] = (),
        addr: str = "",
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.code: grpc.StatusCode = code if code is not None else self.default_code
        self.message = message
        self.details = details
        # The ErrorInfo reason the server sent (a `Reason` value), "" when it sent none.
        self.reason = reason or reason_in(details)
        # The address the failed call went to ("" when not known).
        self.addr = addr

    @property
    def code_name(self) -> str:
        """The canonical status name, e.g. "NOT_FOUND"."""
        return str(self.code.name)

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class InvalidArgument(ScrollbackError):
    """A malformed request or reference (INVALID_ARGUMENT)."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ScrollbackError):
    """Unknown, or not yours (NOT_FOUND)."""

    default_code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(ScrollbackError):
    """A pin mismatch, a rewritten transcript, a missing blob on accept (FAILED_PRECONDITION)."""

    default_code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRange(ScrollbackError):
    """A read offset past the end (OUT_OF_RANGE)."""

    default_code = grpc.StatusCode.OUT_OF_RANGE


class ResourceExhausted(ScrollbackError):
    """Over a size bound (RESOURCE_EXHAUSTED)."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class AlreadyExists(ScrollbackError):
    """A client_txn_id reused with different content (ALREADY_EXISTS)."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class Unauthenticated(ScrollbackError):
    """No or bad credentials (UNAUTHENTICATED)."""

    default_code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ScrollbackError):
    """Credentials without the right (PERMISSION_DENIED)."""

    default_code = grpc.StatusCode.PERMISSION_DENIED


class DataLoss(ScrollbackError):
    """Corrupt stored bytes, or bytes that do not match their digest (DATA_LOSS)."""

    default_code = grpc.StatusCode.DATA_LOSS


class Unavailable(ScrollbackError):
    """The service could not be reached (UNAVAILABLE), after the retries."""

    default_code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ScrollbackError):
    """The call's deadline passed (DEADLINE_EXCEEDED), after the retries."""

    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(ScrollbackError):
    """The call was cancelled (CANCELLED)."""

    default_code = grpc.StatusCode.CANCELLED


class Internal(ScrollbackError):
    """A server bug (INTERNAL); the message never carries internals."""

    default_code = grpc.StatusCode.INTERNAL


class MalformedRequest(InvalidArgument):
    """A request message that does not parse (MALFORMED_REQUEST)."""

    default_reason = Reason.MALFORMED_REQUEST


class RefInvalid(InvalidArgument):
    """A malformed media reference or pin (REF_INVALID)."""

    default_reason = Reason.REF_INVALID


class BlobMismatch(InvalidArgument):
    """Uploaded bytes that do not match their declared sha256 or size (BLOB_MISMATCH)."""

    default_reason = Reason.BLOB_MISMATCH


class SessionNotFound(NotFound):
    """An unknown session, or one the caller may not see (SESSION_NOT_FOUND)."""

    default_reason = Reason.SESSION_NOT_FOUND


class MediaNotFound(NotFound):
    """An unknown photo or blob, or one the caller may not see (MEDIA_NOT_FOUND)."""

    default_reason = Reason.MEDIA_NOT_FOUND


class SessionAmbiguous(FailedPrecondition):
    """A session id shared by two transcripts (SESSION_AMBIGUOUS)."""

    default_reason = Reason.SESSION_AMBIGUOUS


class TranscriptRewritten(FailedPrecondition):
    """A page token or watch position of a transcript rewritten or truncated since (TRANSCRIPT_REWRITTEN)."""

    default_reason = Reason.TRANSCRIPT_REWRITTEN


class PinMismatch(FailedPrecondition):
    """A pin that no longer matches the photo its reference names (PIN_MISMATCH)."""

    default_reason = Reason.PIN_MISMATCH


class BlobMissing(FailedPrecondition):
    """An attachment whose blob was not uploaded first (BLOB_MISSING)."""

    default_reason = Reason.BLOB_MISSING


class ChatKeyBound(FailedPrecondition):
    """A chat key already bound to another session (CHAT_KEY_BOUND)."""

    default_reason = Reason.CHAT_KEY_BOUND


class NotAnImage(FailedPrecondition):
    """A thumbnail asked of a medium that is not a decodable image (NOT_AN_IMAGE)."""

    default_reason = Reason.NOT_AN_IMAGE


class RangeNotSatisfiable(OutOfRange):
    """A read offset or limit outside the medium (RANGE_NOT_SATISFIABLE)."""

    default_reason = Reason.RANGE_NOT_SATISFIABLE


class TxnConflict(AlreadyExists):
    """A client_txn_id reused with different content (TXN_CONFLICT)."""

    default_reason = Reason.TXN_CONFLICT


class TooLarge(ResourceExhausted):
    """A request field over its size bound (TOO_LARGE)."""

    default_reason = Reason.TOO_LARGE


class LineTooLarge(ResourceExhausted):
    """An entry's line over the max line size (LINE_TOO_LARGE)."""

    default_reason = Reason.LINE_TOO_LARGE


class ImageTooLarge(ResourceExhausted):
    """An image with more pixels than the thumbnailer decodes (IMAGE_TOO_LARGE)."""

    default_reason = Reason.IMAGE_TOO_LARGE


class BlobTooLarge(ResourceExhausted):
    """An upload over the blob size limit (BLOB_TOO_LARGE)."""

    default_reason = Reason.BLOB_TOO_LARGE


class ChainTooLarge(ResourceExhausted):
    """A session whose image numbering is over its memory budget (CHAIN_TOO_LARGE)."""

    default_reason = Reason.CHAIN_TOO_LARGE


class StorageFull(ResourceExhausted):
    """The blob store's quota is used up (STORAGE_FULL)."""

    default_reason = Reason.STORAGE_FULL


class TooManyStreams(ResourceExhausted):
    """Over the caller's limit of concurrent calls (TOO_MANY_STREAMS)."""

    default_reason = Reason.TOO_MANY_STREAMS


class DelegationNotAllowed(PermissionDenied):
    """`scrollback-on-behalf-of` the token may not send here (DELEGATION_NOT_ALLOWED): it is no
    delegate, its entry does not list this RPC, or it names a principal of every project."""

    default_reason = Reason.DELEGATION_NOT_ALLOWED


class UnknownPrincipal(PermissionDenied):
    """A delegate naming no principal it may act for (UNKNOWN_PRINCIPAL)."""

    default_reason = Reason.UNKNOWN_PRINCIPAL


class UploadIdle(DeadlineExceeded):
    """An upload that sent nothing for too long (UPLOAD_IDLE)."""

    default_reason = Reason.UPLOAD_IDLE


class UploadDeadline(DeadlineExceeded):
    """An upload over its total time (UPLOAD_DEADLINE)."""

    default_reason = Reason.UPLOAD_DEADLINE


class LookupCancelled(DeadlineExceeded):
    """A media lookup stopped by the call's deadline (LOOKUP_CANCELLED)."""

    default_reason = Reason.LOOKUP_CANCELLED


class StreamStalled(DeadlineExceeded):
    """A stream whose reader granted no flow-control window for too long (STREAM_STALLED)."""

    default_reason = Reason.STREAM_STALLED


class MediaCorrupt(DataLoss):
    """Stored bytes that are corrupt or undecodable (MEDIA_CORRUPT)."""

    default_reason = Reason.MEDIA_CORRUPT


class StoreBusy(Unavailable):
    """The state store stayed locked; retrying later may succeed (STORE_BUSY)."""

    default_reason = Reason.STORE_BUSY


class LongTailPending(Unavailable):
    """The transcript ends in a newline-less line over the max line size, not indexed yet;
    retrying shortly succeeds (LONG_TAIL_PENDING)."""

    default_reason = Reason.LONG_TAIL_PENDING


class TranscriptsUnavailable(Unavailable):
    """The object store holding the transcripts timed out, failed or sent a truncated
    read, after retries; retrying later may succeed (TRANSCRIPTS_UNAVAILABLE)."""

    default_reason = Reason.TRANSCRIPTS_UNAVAILABLE


_BY_CODE: dict[grpc.StatusCode, type[ScrollbackError]] = {
    cls.default_code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        FailedPrecondition,
        OutOfRange,
        ResourceExhausted,
        AlreadyExists,
        Unauthenticated,
        PermissionDenied,
        DataLoss,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Internal,
    )
}


_BY_REASON: dict[str, type[ScrollbackError]] = {
    str(cls.default_reason): cls
    for cls in (
        MalformedRequest,
        RefInvalid,
        BlobMismatch,
        SessionNotFound,
        MediaNotFound,
        SessionAmbiguous,
        TranscriptRewritten,
        PinMismatch,
        BlobMissing,
        ChatKeyBound,
        NotAnImage,
        RangeNotSatisfiable,
        TxnConflict,
        TooLarge,
        LineTooLarge,
        ImageTooLarge,
        BlobTooLarge,
        ChainTooLarge,
        StorageFull,
        TooManyStreams,
        DelegationNotAllowed,
        UnknownPrincipal,
        UploadIdle,
        UploadDeadline,
        LookupCancelled,
        StreamStalled,
        MediaCorrupt,
        StoreBusy,
        LongTailPending,
        TranscriptsUnavailable,
    )
}


def error_class(code: grpc.StatusCode, reason: str = "") -> type[ScrollbackError]:
    """The exception class of a reason under its status code, else of the status code.

    A reason class is used only with the status code it belongs to, so a
    reason a newer server adds, or one sent with an unexpected code, still
    gives the status code's class.
    """
    by_reason = _BY_REASON.get(reason)
    if by_reason is not None and by_reason.default_code == code:
        return by_reason
    return _BY_CODE.get(code, ScrollbackError)


def reason_in(details: tuple[Any, ...]) -> str:
    """The reason of the first Scrollback ErrorInfo among a status's details, or ""."""
    for detail in details:
        if not detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            continue
        info = error_details_pb2.ErrorInfo()
        detail.Unpack(info)
        if info.domain == DOMAIN:
            return str(info.reason)
    return ""


def _rich_details(error: grpc.RpcError) -> tuple[Any, ...]:
    try:
        status = rpc_status.from_call(cast(grpc.Call, error))
    except (ValueError, AttributeError, TypeError):
        return ()
    if status is None:
        return ()
    return tuple(status.details)


def from_rpc_error(error: grpc.RpcError, *, addr: str = "") -> ScrollbackError:
    """The typed exception for a failed call (sync grpc.Call or grpc.aio.AioRpcError).

    `addr`, the address called, is kept on the exception: an UNAVAILABLE
    caller can then say which service did not answer.
    """
    code_method = getattr(error, "code", None)
    details_method = getattr(error, "details", None)
    code = code_method() if callable(code_method) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    message = details_method() if callable(details_method) else None
    text = str(message) if message else code.name.lower().replace("_", " ")
    details = _rich_details(error)
    reason = reason_in(details)
    return error_class(code, reason)(text, code=code, details=details, addr=addr, reason=reason)
