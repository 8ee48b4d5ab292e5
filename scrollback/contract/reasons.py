"""The error reasons both services send on the wire, in a `google.rpc.ErrorInfo`.

Every failed call carries, in its status details (`grpc-status-details-bin`), one
`google.rpc.ErrorInfo` whose `domain` is `DOMAIN` and whose `reason` is one of
`Reason`: a stable, machine-readable name for the cause, so a client tells a pin
mismatch from a rewritten transcript without reading the message. The status
code stays the coarse class; the reason is the exact cause. The list, with the
status code each comes with, is in docs/contract.md §9 and the protos' comments.
"""

from __future__ import annotations

from enum import StrEnum

# The ErrorInfo domain of every reason below.
DOMAIN = "scrollback"


class Reason(StrEnum):
    """One stable name per cause of failure; a new cause gets a new name, never a reused one."""

    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    REF_INVALID = "REF_INVALID"
    BLOB_MISMATCH = "BLOB_MISMATCH"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    MEDIA_NOT_FOUND = "MEDIA_NOT_FOUND"
    SESSION_AMBIGUOUS = "SESSION_AMBIGUOUS"
    TRANSCRIPT_REWRITTEN = "TRANSCRIPT_REWRITTEN"
    PIN_MISMATCH = "PIN_MISMATCH"
    BLOB_MISSING = "BLOB_MISSING"
    CHAT_KEY_BOUND = "CHAT_KEY_BOUND"
    NOT_AN_IMAGE = "NOT_AN_IMAGE"
    RANGE_NOT_SATISFIABLE = "RANGE_NOT_SATISFIABLE"
    TXN_CONFLICT = "TXN_CONFLICT"
    TOO_LARGE = "TOO_LARGE"
    LINE_TOO_LARGE = "LINE_TOO_LARGE"
    IMAGE_TOO_LARGE = "IMAGE_TOO_LARGE"
    BLOB_TOO_LARGE = "BLOB_TOO_LARGE"
    CHAIN_TOO_LARGE = "CHAIN_TOO_LARGE"
    STORAGE_FULL = "STORAGE_FULL"
    TOO_MANY_STREAMS = "TOO_MANY_STREAMS"
    UPLOAD_IDLE = "UPLOAD_IDLE"
    UPLOAD_DEADLINE = "UPLOAD_DEADLINE"
    LOOKUP_CANCELLED = "LOOKUP_CANCELLED"
    STREAM_STALLED = "STREAM_STALLED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    DELEGATION_NOT_ALLOWED = "DELEGATION_NOT_ALLOWED"
    UNKNOWN_PRINCIPAL = "UNKNOWN_PRINCIPAL"
    MEDIA_CORRUPT = "MEDIA_CORRUPT"
    STORE_BUSY = "STORE_BUSY"
    LONG_TAIL_PENDING = "LONG_TAIL_PENDING"
    TRANSCRIPTS_UNAVAILABLE = "TRANSCRIPTS_UNAVAILABLE"
    INTERNAL = "INTERNAL"


# The gRPC status code (its canonical name) each reason is sent with.
STATUS_OF: dict[Reason, str] = {
    Reason.MALFORMED_REQUEST: "INVALID_ARGUMENT",
    Reason.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    Reason.REF_INVALID: "INVALID_ARGUMENT",
    Reason.BLOB_MISMATCH: "INVALID_ARGUMENT",
    Reason.SESSION_NOT_FOUND: "NOT_FOUND",
    Reason.MEDIA_NOT_FOUND: "NOT_FOUND",
    Reason.SESSION_AMBIGUOUS: "FAILED_PRECONDITION",
    Reason.TRANSCRIPT_REWRITTEN: "FAILED_PRECONDITION",
    Reason.PIN_MISMATCH: "FAILED_PRECONDITION",
    Reason.BLOB_MISSING: "FAILED_PRECONDITION",
    Reason.CHAT_KEY_BOUND: "FAILED_PRECONDITION",
    Reason.NOT_AN_IMAGE: "FAILED_PRECONDITION",
    Reason.RANGE_NOT_SATISFIABLE: "OUT_OF_RANGE",
    Reason.TXN_CONFLICT: "ALREADY_EXISTS",
    Reason.TOO_LARGE: "RESOURCE_EXHAUSTED",
    Reason.LINE_TOO_LARGE: "RESOURCE_EXHAUSTED",
    Reason.IMAGE_TOO_LARGE: "RESOURCE_EXHAUSTED",
    Reason.BLOB_TOO_LARGE: "RESOURCE_EXHAUSTED",
    Reason.CHAIN_TOO_LARGE: "RESOURCE_EXHAUSTED",
    Reason.STORAGE_FULL: "RESOURCE_EXHAUSTED",
    Reason.TOO_MANY_STREAMS: "RESOURCE_EXHAUSTED",
    Reason.UPLOAD_IDLE: "DEADLINE_EXCEEDED",
    Reason.UPLOAD_DEADLINE: "DEADLINE_EXCEEDED",
    Reason.LOOKUP_CANCELLED: "DEADLINE_EXCEEDED",
    Reason.STREAM_STALLED: "DEADLINE_EXCEEDED",
    Reason.UNAUTHENTICATED: "UNAUTHENTICATED",
    Reason.DELEGATION_NOT_ALLOWED: "PERMISSION_DENIED",
    Reason.UNKNOWN_PRINCIPAL: "PERMISSION_DENIED",
    Reason.MEDIA_CORRUPT: "DATA_LOSS",
    Reason.STORE_BUSY: "UNAVAILABLE",
    Reason.LONG_TAIL_PENDING: "UNAVAILABLE",
    Reason.TRANSCRIPTS_UNAVAILABLE: "UNAVAILABLE",
    Reason.INTERNAL: "INTERNAL",
}
