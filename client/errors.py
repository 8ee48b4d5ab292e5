"""Typed exceptions of the Scrollback client, one per gRPC status code the services use.

`from_rpc_error(error)` turns a `grpc.RpcError` (sync or `grpc.aio.AioRpcError`)
into the matching `ScrollbackError` subclass, carrying the status code, the
server's message and any rich error details (`google.rpc.Status.details`, read
with `grpc_status.rpc_status.from_call` when the server sent them). Callers
catch `ScrollbackError` for "any failure" or a subclass for one cause:

    try:
        client.read_window("abc")
    except NotFound:
        ...
"""

from __future__ import annotations

from typing import Any, cast

import grpc
from grpc_status import rpc_status

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "ScrollbackError",
    "Unauthenticated",
    "Unavailable",
    "from_rpc_error",
]


class ScrollbackError(Exception):
    """A failed Scrollback call: `code` (a grpc.StatusCode), `message`, rich `details`."""

    default_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        details: tuple[Any, ...] = (),
        addr: str = "",
    ) -> None:
        super().__init__(message)
        self.code: grpc.StatusCode = code if code is not None else self.default_code
        self.message = message
        self.details = details
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


def error_class(code: grpc.StatusCode) -> type[ScrollbackError]:
    """The exception class of a status code (ScrollbackError for the others)."""
    return _BY_CODE.get(code, ScrollbackError)


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
    return error_class(code)(text, code=code, details=_rich_details(error), addr=addr)
