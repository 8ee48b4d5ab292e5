"""The AcceptedMessageStore protocol: where accepted messages are recorded, whatever the backend.

Every method that touches chat keys or replays takes the caller's namespace
(`principal`: scrollback.principals.namespace, the anonymous principal without
auth): a chat key lives in its principal's namespace, so one principal's
bindings and chat-key messages are invisible to, and untouched by, another.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Protocol

from history_service.accept import AcceptedRecord, AcceptRequest


class AcceptedMessageStore(Protocol):
    """Durable acceptance records. Every method blocks: call it from a worker thread."""

    def accept(
        self, principal: str, request: AcceptRequest, readable: Set[str]
    ) -> tuple[AcceptedRecord, bool]:
        """Record a message durably (committed and synced); return it and whether it was a replay.

        `readable` holds the attachment digests the caller may read
        (scrollback.state.blob_access); any other attachment, like one whose
        blob does not exist, is BlobMissingError. A chat key resolves to its
        binding in `principal`'s namespace.
        """
        ...

    def bind(self, principal: str, chat_key: str, session_id: str) -> int:
        """Bind `principal`'s chat key to a session; return how many of its messages moved."""
        ...

    def binding(self, principal: str, chat_key: str) -> str | None:
        """The session `principal`'s chat key is bound to, if any."""
        ...

    def followed(self, session_id: str) -> bool:
        """Whether any principal's chat key is bound to the session (a program, such as a
        chat bridge, follows it and takes the messages queued for it)."""
        ...

    def pending(
        self, principal: str, session_id: str, chat_key: str
    ) -> tuple[list[AcceptedRecord], int]:
        """The unretired messages of a session (or of `principal`'s unbound chat key),
        oldest first, and the last seq."""
        ...

    def since(
        self, principal: str, session_id: str, chat_key: str, after_seq: int
    ) -> list[AcceptedRecord]:
        """The messages of a session or of `principal`'s chat key with seq > after_seq,
        oldest first."""
        ...

    def last_seq(self) -> int:
        """The highest seq assigned so far (0 when none)."""
        ...

    def owned_by(self, digests: Sequence[str], principal: str) -> set[str]:
        """Which of these digests `principal` uploaded (scrollback.state.blob_access)."""
        ...

    def referencing(self, sha256: str) -> list[tuple[str | None, str | None]]:
        """(session_id, accepted_by) of the accepted messages that reference a blob."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...
