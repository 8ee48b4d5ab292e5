"""Accepted messages: the request shape, its validation and its content digest.

Recording a message IS acceptance (docs/contract.md §7). A retry with the same
client_txn_id is recognized by the digest of the canonical content (target,
text, attachments): the same digest replays the original answer, another one
is a conflict.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

from history_service.errors import InvalidArgumentError, TooLargeError
from scrollback.contract.refs import parse_blob_ref, validate_id, validate_session_id

MAX_TEXT_BYTES = 1024 * 1024
MAX_ATTACHMENTS = 32
MAX_NAME_CHARS = 255


@dataclass(frozen=True, slots=True)
class AttachmentSpec:
    """One attachment: a `media:<sha256>` ref, a file name and a declared media type."""

    ref: str
    name: str
    media_type: str

    @property
    def sha256(self) -> str:
        """The blob's digest."""
        return self.ref.removeprefix("media:")


@dataclass(frozen=True, slots=True)
class AcceptRequest:
    """A validated AcceptMessage request; exactly one of session_id and chat_key is set."""

    client_txn_id: str
    session_id: str
    chat_key: str
    text: str
    attachments: tuple[AttachmentSpec, ...]

    @property
    def digest(self) -> str:
        """The sha256 of the canonical content, compared on a retry."""
        canonical = orjson.dumps(
            {
                "target": ["session", self.session_id]
                if self.session_id
                else ["chat", self.chat_key],
                "text": self.text,
                "attachments": [[a.ref, a.name, a.media_type] for a in self.attachments],
            },
            option=orjson.OPT_SORT_KEYS,
        )
        return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, slots=True)
class AcceptedRecord:
    """An accepted message as recorded.

    `seq` is the store's own order of acceptances (every principal's, one
    counter: watches and the bus follow it); `public_seq` is what callers see
    as `AcceptedMessage.seq`: the same order, but the acceptance time in
    microseconds (`next_public_seq`), so it tells no caller how many messages
    the others sent in between.
    """

    seq: int
    client_txn_id: str
    session_id: str
    chat_key: str
    text: str
    attachments: tuple[AttachmentSpec, ...]
    accepted_at: float
    public_seq: int = 0


def validate_accept(
    client_txn_id: str,
    session_id: str,
    chat_key: str,
    text: str,
    attachments: list[tuple[str, str, str]],
) -> AcceptRequest:
    """Check an AcceptMessage request (InvalidArgumentError, RefError, TooLargeError)."""
    validate_id(client_txn_id, "client_txn_id")
    if bool(session_id) == bool(chat_key):
        raise InvalidArgumentError("exactly one of session_id and chat_key is required")
    if session_id:
        validate_session_id(session_id)
    else:
        validate_id(chat_key, "chat key")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise TooLargeError("the message text is over 1 MiB")
    if len(attachments) > MAX_ATTACHMENTS:
        raise TooLargeError("more than 32 attachments")
    specs: list[AttachmentSpec] = []
    for ref, name, media_type in attachments:
        parse_blob_ref(ref)
        if len(name) > MAX_NAME_CHARS or len(media_type) > MAX_NAME_CHARS:
            raise InvalidArgumentError("an attachment name or media type is over 255 characters")
        specs.append(AttachmentSpec(ref, name, media_type))
    return AcceptRequest(client_txn_id, session_id, chat_key, text, tuple(specs))
