"""Domain errors of the history service.

Each maps to one reason, and so one gRPC status, in ERROR_TABLE below. Messages are
fixed texts: they never carry a path, a token or a payload.
"""

from __future__ import annotations

from collections.abc import Mapping

from scrollback.contract.reasons import Reason
from scrollback.contract.refs import RefError

# Raised where a file is checked (scrollback.linefile), mapped to its reason here.
from scrollback.linefile import FileRewrittenError as FileRewrittenError
from scrollback.objects import TranscriptsUnavailableError
from scrollback.state.errors import StoreBusyError
from scrollback.transcripts import AmbiguousSessionError, SessionNotFoundError


class InvalidArgumentError(ValueError):
    """A malformed request field (page size, token, position, mode, limit)."""


class TooLargeError(Exception):
    """A request field over its size bound."""


class TxnConflictError(Exception):
    """A client_txn_id reused with different content."""

    def __init__(self) -> None:
        super().__init__("client_txn_id was already used with different content")


class BlobMissingError(Exception):
    """An attachment whose blob is not in the blob store."""

    def __init__(self) -> None:
        super().__init__("an attachment's blob is not in the blob store; upload it first")


class ChatKeyBoundError(Exception):
    """A chat key already bound to another session."""

    def __init__(self) -> None:
        super().__init__("the chat key is already bound to another session")


class LongTailPendingError(Exception):
    """The transcript ends in an unterminated line longer than the max line size, and where
    that line starts is not indexed yet (it is being indexed: retry shortly)."""

    def __init__(self) -> None:
        super().__init__(
            "the transcript ends in a line longer than the max line size; "
            "its start is being located, retry shortly"
        )


class ChainTooLargeError(Exception):
    """A transcript whose API numbering would hold more than its memory budget."""

    def __init__(self) -> None:
        super().__init__(
            "the session's message chain is too long to number its images within the memory budget"
        )


# The one map from domain exceptions to reasons (docs/contract.md §9), applied to every RPC.
ERROR_TABLE: Mapping[type[BaseException], Reason] = {
    RefError: Reason.REF_INVALID,
    InvalidArgumentError: Reason.INVALID_ARGUMENT,
    SessionNotFoundError: Reason.SESSION_NOT_FOUND,
    AmbiguousSessionError: Reason.SESSION_AMBIGUOUS,
    FileRewrittenError: Reason.TRANSCRIPT_REWRITTEN,
    BlobMissingError: Reason.BLOB_MISSING,
    ChatKeyBoundError: Reason.CHAT_KEY_BOUND,
    TxnConflictError: Reason.TXN_CONFLICT,
    TooLargeError: Reason.TOO_LARGE,
    ChainTooLargeError: Reason.CHAIN_TOO_LARGE,
    LongTailPendingError: Reason.LONG_TAIL_PENDING,
    StoreBusyError: Reason.STORE_BUSY,
    TranscriptsUnavailableError: Reason.TRANSCRIPTS_UNAVAILABLE,
}
