"""How a window goes on the wire: its entries as ReadWindow / Bootstrap messages, then its end.

The servicer hands a `Window` to `window_responses` and yields what it gives.
Entries the window holds already encoded (`history_service.entry_cache`) go out
as their bytes (`Serialized`: grpc sends them unchanged, `add_history_servicer`),
alone or joined into `EntryBatch` messages; other entries are built as messages
here. The wire format is the generated one; only the copying is saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import TypeVar

from history_service.entry_cache import EncodedEntry, entry_messages, links_in
from history_service.lines import ServedLine
from history_service.windows import Window
from scrollback.history.v1 import history_pb2 as pb
from scrollback.server.serialized import Serialized, length_delimited


def _window_end(window: Window) -> pb.WindowEnd:
    return pb.WindowEnd(
        next_page_token=window.next_page_token,
        skipped_lines=window.skipped_lines,
        file_size_bytes=window.file_size,
    )


# The two streams a window is sent on.
WindowResponse = TypeVar("WindowResponse", pb.ReadWindowResponse, pb.BootstrapResponse)

# The largest EntryBatch message sent, whatever a client asks for: well below
# the 4 MiB message bound, and small enough that a stream holds little more
# than its window's small entries (which the window holds anyway).
_MAX_BATCH_BYTES = 1024 * 1024


_ENTRIES = pb.EntryBatch.DESCRIPTOR.fields_by_name["entries"].number


def _wire(response: type[WindowResponse], item: str, payload: bytes) -> Serialized:
    """A serialized response holding one already-encoded field.

    Sent as it is: ReadWindow and Bootstrap are registered so that grpc sends
    a `Serialized` unchanged (`add_history_servicer`), so entries encoded
    once are never parsed or serialized again.
    """
    return Serialized(length_delimited(response.DESCRIPTOR.fields_by_name[item].number, payload))


def _entry_of(item: bytes) -> bytes:
    """The Entry's own bytes in an EntryBatch item (after its one-byte tag and its length)."""
    at = 1
    while item[at] & 0x80:
        at += 1
    return item[at + 1 :]


def _batch_item(entry: EncodedEntry, links: Mapping[str, str] | None) -> bytes:
    """The entry as an EntryBatch item, with the session's sub-agent links it names added."""
    if not links:
        return entry.item
    message = pb.Entry.FromString(entry.data)
    found = links_in(message.json.encode(), links)
    if not found:
        return entry.item
    message.subagent_links.extend(found)
    return length_delimited(_ENTRIES, message.SerializeToString())


async def window_responses(
    response: type[WindowResponse],
    session_id: str,
    window: Window,
    links: Mapping[str, str] | None = None,
    max_batch_bytes: int = 0,
) -> AsyncIterator[WindowResponse | Serialized]:
    """A window as `response` messages: entries (alone or batched), then the end.

    With `max_batch_bytes` 0 each Entry is its own message (then its json
    chunks). Otherwise runs of small entries (those the window holds anyway,
    each under the budget) are packed into EntryBatch messages of at most
    min(max_batch_bytes, _MAX_BATCH_BYTES) bytes; the others go alone.
    Entries the window holds already encoded (history_service.entry_cache) go
    on the wire as they are: a batch is their bytes joined. Only the entry
    being sent (or one batch) is held beyond the window: a held-back entry is
    served again from the window's file (in a thread) just before it is sent,
    and dropped after; it is never batched.
    """
    budget = min(max_batch_bytes, _MAX_BATCH_BYTES)
    if budget and not links:
        # The common case: every entry already encoded and all of them within one
        # batch: that batch, joined in C, without the per-entry loop below.
        entries = window.entries
        items = [entry.item for entry in entries if type(entry) is EncodedEntry]
        if items and len(items) == len(entries) and sum(map(len, items)) <= budget:
            yield _wire(response, "entries", b"".join(items))
            yield response(end=_window_end(window))
            return
    batch: list[bytes] = []
    batch_bytes = 0
    for entry in window.entries:
        item: bytes | None = None
        if isinstance(entry, EncodedEntry):
            item = _batch_item(entry, links)
        elif budget and isinstance(entry, ServedLine) and len(entry.stripped.json) < budget:
            first = next(entry_messages(session_id, entry, links))
            item = length_delimited(_ENTRIES, first.SerializeToString())
        if item is not None:
            if budget and len(item) <= budget:
                if batch_bytes + len(item) > budget:
                    yield _wire(response, "entries", b"".join(batch))
                    batch = []
                    batch_bytes = 0
                batch.append(item)
                batch_bytes += len(item)
                continue
            if isinstance(entry, EncodedEntry):
                if batch_bytes:
                    yield _wire(response, "entries", b"".join(batch))
                    batch = []
                    batch_bytes = 0
                yield _wire(response, "entry", _entry_of(item))
                continue
        if batch_bytes:
            yield _wire(response, "entries", b"".join(batch))
            batch = []
            batch_bytes = 0
        assert not isinstance(entry, EncodedEntry)
        served = (
            entry
            if isinstance(entry, ServedLine)
            else await asyncio.to_thread(window.materialize, entry)
        )
        # Built at once and then dropped one by one, so that while a message
        # waits for the client only it and the entry's later chunks are held.
        messages = list(entry_messages(session_id, served, links))
        del served
        messages.reverse()
        while messages:
            message = messages.pop()
            # Sent serialized: while it waits for the client, only these bytes and
            # grpc's copy of them are held, not a response message besides.
            wrapped = _wire(
                response,
                "entry" if isinstance(message, pb.Entry) else "entry_json_chunk",
                message.SerializeToString(),
            )
            del message
            yield wrapped
            del wrapped
    if batch_bytes:
        yield _wire(response, "entries", b"".join(batch))
    yield response(end=_window_end(window))
