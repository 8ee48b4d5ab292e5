"""Row <-> record rules both accepted-message backends share (no SQL here).

`COLUMNS` is the column list every backend selects for a record, in the order
`record_of` reads; `replay_of` decides what a row found for a reused
client_txn_id means (a replay, or TxnConflictError); `attachments_json` is the
stored form of the attachments and `new_record` the record of a fresh insert;
`attached_digests` checks the attachments against what the caller may read.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

import orjson

from history_service.accept import AcceptedRecord, AcceptRequest, AttachmentSpec
from history_service.errors import BlobMissingError, TxnConflictError

# How pending messages are grouped for ageing (the newest `keep` per group): a
# session, or one principal's unbound chat key, so one principal's flood never
# retires another's messages.
PENDING_GROUP = (
    "session_id, CASE WHEN session_id IS NULL THEN accepted_by END,"
    " CASE WHEN session_id IS NULL THEN chat_key END"
)
COLUMNS = "seq, client_txn_id, session_id, chat_key, text, attachments, accepted_at, public_seq"
# Selected after COLUMNS when a reused client_txn_id is looked up.
REPLAY_COLUMNS = f"{COLUMNS}, accepted_by, content_digest"


def record_of(row: tuple[Any, ...]) -> AcceptedRecord:
    """The record of a row of COLUMNS (NULL session id / chat key read as "").

    The text is a str (SQLite's TEXT) or its UTF-8 bytes (PostgreSQL's BYTEA,
    since PostgreSQL's TEXT cannot hold the U+0000 a message may hold).
    """
    seq, txn, session_id, chat_key, text, attachments, accepted_at, public_seq = row
    specs = tuple(AttachmentSpec(*item) for item in orjson.loads(attachments))
    return AcceptedRecord(
        int(seq),
        txn,
        session_id or "",
        chat_key or "",
        text if isinstance(text, str) else bytes(text).decode(),
        specs,
        float(accepted_at),
        int(public_seq),
    )


def replay_of(row: tuple[Any, ...], digest: str, principal: str) -> tuple[AcceptedRecord, bool]:
    """The replayed record of a row of REPLAY_COLUMNS for the caller's same client_txn_id.

    Other content is TxnConflictError. Backends look a txn id up in the
    caller's namespace only; the principal check is a second line of defence.
    """
    if row[-1] != digest or (row[-2] or "") != principal:
        raise TxnConflictError()
    return record_of(row[:-2]), True


def attachments_json(request: AcceptRequest) -> str:
    """The stored form of a request's attachments: a JSON list of [ref, name, media_type]."""
    return orjson.dumps([[a.ref, a.name, a.media_type] for a in request.attachments]).decode()


def new_record(
    seq: int, request: AcceptRequest, session_id: str, accepted_at: float, public_seq: int
) -> AcceptedRecord:
    """The record of a message just inserted as `seq` (`public_seq`: `next_public_seq`)."""
    return AcceptedRecord(
        seq,
        request.client_txn_id,
        session_id,
        request.chat_key,
        request.text,
        request.attachments,
        accepted_at,
        public_seq,
    )


# The highest public seq given so far (both backends run it inside their write transaction,
# where acceptances are serialized, so each public seq is past every earlier one).
MAX_PUBLIC_SEQ = "SELECT COALESCE(MAX(public_seq), 0) FROM accepted_message"


def next_public_seq(accepted_at: float, highest: int) -> int:
    """The public seq of an acceptance at `accepted_at` (seconds) after `highest`.

    The acceptance time in microseconds since the Unix epoch, or one past the
    previous public seq when the clock has not moved on since (or went back):
    increasing, never reused, and telling a caller nothing but the time. A
    seq counted over every principal's messages would tell any caller how
    many messages the others sent between two of its own.
    """
    return max(int(accepted_at * 1_000_000), highest + 1)


def attached_digests(request: AcceptRequest, readable: Set[str]) -> list[str]:
    """The request's distinct attachment digests, sorted (the order rows are locked in).

    Any the caller may not read is BlobMissingError, the very answer for a blob
    that does not exist: a known hash is neither a key nor an existence oracle.
    """
    wanted = sorted({a.sha256 for a in request.attachments})
    if any(sha not in readable for sha in wanted):
        raise BlobMissingError()
    return wanted
