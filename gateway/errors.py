"""gRPC status -> HTTP status, and the JSON error body (a fixed text: never a path or a token)."""

from __future__ import annotations

import grpc
from starlette.responses import JSONResponse

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
    409: "the request conflicts with the current state (a stale pin or page token?)",
    415: "the body must be application/json",
    416: "range not satisfiable",
    421: "this gateway does not answer for that host name (SCROLLBACK_GATEWAY_ALLOWED_HOSTS)",
    429: "too many requests or too large",
    500: "internal error",
    502: "the stored bytes are corrupt",
    503: "a service is unavailable",
    504: "a service did not answer in time",
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


def error_response(
    status: int, code: str, headers: dict[str, str] | None = None, message: str | None = None
) -> JSONResponse:
    """`{"error": {"code": ..., "message": ...}}`: the status's fixed message unless one is given."""
    body = {"error": {"code": code, "message": message or MESSAGES.get(status, "error")}}
    return JSONResponse(body, status_code=status, headers=headers)
