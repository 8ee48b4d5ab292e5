"""The one rule for U+0000 in request strings (docs/contract.md, "Text in requests").

A message's text is what a person wrote: transcripts are JSON, where U+0000
is legal (as `\\u0000`), so `AcceptMessage.text` is stored and returned exactly,
U+0000 included, on every state backend. Every other string a request carries
names or selects something (ids, chat keys, file names, media types, project
dirs, filters, queries, tokens), and none of those ever holds U+0000: a
request with one there is INVALID_ARGUMENT before any work, the same answer on
every backend. `nul_field` applies the rule to a whole request message; the
servers' request check (scrollback.server.interceptors.request_check) calls it once per
request message, for every RPC.

Transcripts are not requests: a window serves each line exactly, U+0000
included. What the indexes derive from them (entry types, roles, timestamps,
uuids, message ids, models, tool ids, searchable text) goes through
`indexable`, which writes each U+0000 as U+FFFD, so the search and insight
indexes hold and answer the same on every backend (PostgreSQL's TEXT cannot
hold U+0000, and a hostile line must not stop an index).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no protobuf at import: the workers' parent process loads this module
    from google.protobuf.message import Message

# The string fields whose text is kept exactly as sent, U+0000 included.
VERBATIM_FIELDS = frozenset({"scrollback.history.v1.AcceptMessageRequest.text"})
NUL = "\0"
REPLACEMENT = "\ufffd"


def nul_field(message: Message) -> str | None:
    """The full name of the first string field of `message` holding U+0000 where the
    rule forbids it (nested messages, repeated fields and maps included), or None."""
    for field, value in message.ListFields():
        if field.type == field.TYPE_STRING:
            if field.full_name in VERBATIM_FIELDS:
                continue
            values = value if field.is_repeated else (value,)
            if any(NUL in item for item in values):
                return field.full_name
        elif field.type == field.TYPE_MESSAGE:
            kind = field.message_type
            if kind is not None and kind.GetOptions().map_entry:
                items = [entry for pair in value.items() for entry in pair]
                if any(isinstance(item, str) and NUL in item for item in items):
                    return field.full_name
                nested = [item for item in value.values() if hasattr(item, "ListFields")]
            else:
                nested = list(value) if field.is_repeated else [value]
            for item in nested:
                found = nul_field(item)
                if found is not None:
                    return found
    return None


def indexable(text: str) -> str:
    """Transcript text as an index keeps it: each U+0000 written as U+FFFD."""
    return text.replace(NUL, REPLACEMENT)
