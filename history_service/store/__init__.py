"""Where accepted messages are recorded: the AcceptedMessageStore protocol and its backends."""

from __future__ import annotations

from typing import Protocol

from history_service.accept import AcceptedRecord, AcceptRequest


class AcceptedMessageStore(Protocol):
    """Durable acceptance records. Every method blocks: call it from a worker thread."""

    def accept(self, request: AcceptRequest) -> tuple[AcceptedRecord, bool]:
        """Record a message durably (committed and synced); return it and whether it was a replay."""
        ...

    def bind(self, chat_key: str, session_id: str) -> int:
        """Bind a chat key to a session; return how many messages it moved."""
        ...

    def binding(self, chat_key: str) -> str | None:
        """The session a chat key is bound to, if any."""
        ...

    def pending(self, session_id: str, chat_key: str) -> tuple[list[AcceptedRecord], int]:
        """The unretired messages of a session (or unbound chat key), oldest first, and the last seq."""
        ...

    def since(self, session_id: str, chat_key: str, after_seq: int) -> list[AcceptedRecord]:
        """The messages of a session or chat key with seq > after_seq, oldest first."""
        ...

    def last_seq(self) -> int:
        """The highest seq assigned so far (0 when none)."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...
