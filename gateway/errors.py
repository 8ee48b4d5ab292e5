"""gRPC status -> HTTP status, and the JSON error body (a fixed text: never a path or a token).

The body is `{"error": {"code", "reason", "message"}}`: the gRPC status name, the
service's ErrorInfo reason when it sent one (the same names as gRPC clients see,
scrollback.contract.reasons), and the gateway's own text for that reason or, for
a reason it has no text for, for the HTTP status.
"""

from __future__ import annotations

import grpc
from starlette.responses import JSONResponse

from scrollback.contract.reasons import Reason

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 416,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.DATA_LOSS: 502,
}

# The services' messages are meant to be safe, but the gateway faces browsers: it
# says only what the status means, so no service text (path, token) can reach a body.
MESSAGES: dict[int, str] = {
    400: "malformed request",
    401: "a valid bearer token is required",
    403: "not allowed",
    404: "not found",
    409: "the request conflicts with the current state",
    415: "the body must be application/json",
    416: "range not satisfiable",
    421: "this gateway does not answer for that host name (SCROLLBACK_GATEWAY_ALLOWED_HOSTS)",
    429: "too many requests or too large",
    500: "internal error",
    502: "the stored bytes are corrupt",
    503: "a service is unavailable",
    504: "a service did not answer in time",
}


# What the gateway says for a reason whose status alone would leave the cause to guess.
REASON_MESSAGES: dict[str, str] = {
    Reason.PIN_MISMATCH: "the photo at this reference changed since the reference was made",
    Reason.TRANSCRIPT_REWRITTEN: (
        "the transcript was rewritten since this page token or position was made;"
        " start again from the latest window"
    ),
    Reason.SESSION_AMBIGUOUS: "two transcripts have this session id",
    Reason.BLOB_MISSING: "an attachment's blob is not uploaded",
    Reason.CHAT_KEY_BOUND: "the chat key is bound to another session",
    Reason.NOT_AN_IMAGE: "the medium is not an image the server can make a thumbnail of",
    Reason.TXN_CONFLICT: "client_txn_id was already used with different content",
    Reason.SESSION_NOT_FOUND: "session not found",
    Reason.MEDIA_NOT_FOUND: "photo not found",
    Reason.LINE_TOO_LARGE: "the entry is over the server's max line size",
    Reason.IMAGE_TOO_LARGE: "the image has too many pixels to make a thumbnail",
    Reason.TOO_MANY_STREAMS: "too many calls at once for this user; retry shortly",
    Reason.LONG_TAIL_PENDING: "the transcript's last line is being located; retry shortly",
    Reason.TRANSCRIPTS_UNAVAILABLE: "the transcript store is unavailable; retry later",
}


class HttpError(Exception):
    """An HTTP error answer of a handler (status, code name, and a fixed text of the gateway's)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        # None: the status's text of MESSAGES; a handler's own text never carries request data.
        self.message = message
        self.headers = headers


def http_status(code: grpc.StatusCode) -> int:
    """The HTTP status of a gRPC status code (500 for the others)."""
    return HTTP_STATUS.get(code, 500)


def error_message(status: int, reason: str = "") -> str:
    """The gateway's fixed text for a reason, else for the HTTP status."""
    return REASON_MESSAGES.get(reason) or MESSAGES.get(status, "error")


def error_response(
    status: int,
    code: str,
    headers: dict[str, str] | None = None,
    message: str | None = None,
    reason: str = "",
) -> JSONResponse:
    """`{"error": {"code", "reason", "message"}}`: the fixed text of the reason or status unless
    one is given; `reason` is left out when there is none."""
    error: dict[str, str] = {"code": code}
    if reason:
        error["reason"] = reason
    error["message"] = message or error_message(status, reason)
    return JSONResponse({"error": error}, status_code=status, headers=headers)
