"""How a window goes on the wire: its entries as ReadWindow / Bootstrap messages, then its end.

Everything that turns a served record into bytes is here: `entry_messages`
(an `Entry`, then `EntryJsonChunk`s when its json does not fit one message,
`json_parts`), `links_in` (the session's sub-agent links an entry names) and
`encode` (an entry's one `Entry` message, serialized: an `EncodedEntry`, what
history_service.entry_cache keeps). The servicer hands a `Window`
(history_service.windows) to `window_responses` and yields what it gives.
Entries the window holds already encoded go out as their bytes (`Serialized`:
grpc sends them unchanged, `add_history_servicer`), alone or joined into
`EntryBatch` messages; other entries are built as messages here. The wire
format is the generated one; only the copying is saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from history_service.lines import ServedLine
from history_service.windows import HeldBack, Window, WindowEntry
from scrollback.contract.refs import OPENCODE, entry_name, is_session_id
from scrollback.history.v1 import history_pb2 as pb
from scrollback.opencode.naming import image_names
from scrollback.ref.v1 import ref_pb2
from scrollback.server.serialized import Serialized, length_delimited

# A served entry's json up to this size goes whole into one Entry message
# (below gRPC's 4 MiB, with room for the entry's other fields).
ENTRY_JSON_FIT = 3 * 1024 * 1024 + 512 * 1024
# The size of each EntryJsonChunk part (and of Entry.json when chunked).
JSON_CHUNK_BYTES = 3 * 1024 * 1024

_ENTRIES = pb.EntryBatch.DESCRIPTOR.fields_by_name["entries"].number


@dataclass(frozen=True, slots=True)
class EncodedEntry:
    """A served record as a serialized `Entry` message (no sub-agent links).

    Kept as it goes into an `EntryBatch` (field 1: its tag and length, then
    the Entry's bytes), so a batch is these items joined, nothing rebuilt.
    """

    offset: int
    line_size: int
    json_size: int
    item: bytes
    # Where the Entry's own bytes start in `item` (after the tag and length).
    head: int

    @property
    def data(self) -> bytes:
        """The serialized Entry alone (a copy)."""
        return self.item[self.head :]


def json_parts(json: bytes, part_bytes: int = JSON_CHUNK_BYTES) -> list[str]:
    """Split a json text into parts of at most `part_bytes`, on UTF-8 character boundaries."""
    if len(json) <= ENTRY_JSON_FIT:
        return [json.decode("utf-8", "replace")]
    parts: list[str] = []
    position = 0
    while position < len(json):
        cut = min(len(json), position + part_bytes)
        while cut < len(json) and cut > position and (json[cut] & 0xC0) == 0x80:
            cut -= 1
        parts.append(json[position:cut].decode("utf-8", "replace"))
        position = cut
    return parts


def links_in(json: bytes, links: Mapping[str, str]) -> list[pb.SubagentLink]:
    """The known sub-agent links whose tool_use id this entry names (as a JSON string)."""
    return [
        pb.SubagentLink(tool_use_id=tool_use_id, session_id=agent)
        for tool_use_id, agent in sorted(links.items())
        if b'"' + tool_use_id.encode() + b'"' in json
    ]


def entry_messages(
    session_id: str, served: ServedLine, links: Mapping[str, str] | None = None
) -> Iterator[pb.Entry | pb.EntryJsonChunk]:
    """An Entry, then EntryJsonChunks when its json does not fit in one message."""
    line = served.stripped
    refs = []
    if line.images and is_session_id(session_id):
        # A line without a usable uuid (every rollout line) is named by its offset; an
        # opencode message's image by the part that holds it.
        name = entry_name(line.uuid, served.offset)
        by_part = image_names(line) if line.type == OPENCODE else {}
        named = [(image, by_part.get(image.index, (name, image.index))) for image in line.images]
        refs = [
            ref_pb2.MediaRef(
                session_id=session_id,
                entry_uuid=entry,
                index=index,
                pin=image.pin,
                declared_media_type=image.declared_media_type,
                approx_size_bytes=image.approx_size_bytes,
                uri=f"{session_id}/{entry}/{index}",
                line_offset_hint=served.offset,
            )
            for image, (entry, index) in named
        ]
    parts = json_parts(line.json)
    yield pb.Entry(
        uuid=line.uuid,
        type=line.type,
        timestamp=line.timestamp,
        byte_offset=served.offset,
        json=parts[0],
        media_refs=refs,
        failed_image_indexes=list(line.failed_image_indexes),
        json_size_bytes=len(line.json),
        line_size_bytes=served.line_size,
        oversize=line.oversize,
        payloads_deferred=served.payloads_deferred,
        subagent_links=links_in(line.json, links) if links else [],
    )
    for part in parts[1:]:
        yield pb.EntryJsonChunk(byte_offset=served.offset, json_part=part)


def encode(session_id: str, served: ServedLine) -> EncodedEntry:
    """The entry's one `Entry` message, serialized (its json must fit one message)."""
    data = next(entry_messages(session_id, served)).SerializeToString()
    item = length_delimited(_ENTRIES, data)
    return EncodedEntry(
        served.offset, served.line_size, len(served.stripped.json), item, len(item) - len(data)
    )


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


def _one_batch(window: Window, budget: int) -> bytes | None:
    """The window's entries as one EntryBatch's bytes, if all are encoded and fit `budget`.

    The common case, joined in C without the per-entry loop of `window_responses`.
    """
    entries = window.entries
    items = [entry.item for entry in entries if type(entry) is EncodedEntry]
    if items and len(items) == len(entries) and sum(map(len, items)) <= budget:
        return b"".join(items)
    return None


def _item_of(
    session_id: str, entry: WindowEntry, links: Mapping[str, str] | None, budget: int
) -> bytes | None:
    """The entry as an EntryBatch item, when it is encoded or small enough to batch."""
    if isinstance(entry, EncodedEntry):
        return _batch_item(entry, links)
    if budget and isinstance(entry, ServedLine) and len(entry.stripped.json) < budget:
        first = next(entry_messages(session_id, entry, links))
        return length_delimited(_ENTRIES, first.SerializeToString())
    return None


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
    whole = _one_batch(window, budget) if budget and not links else None
    if whole is not None:
        yield _wire(response, "entries", whole)
        yield response(end=_window_end(window))
        return
    batch: list[bytes] = []
    batch_bytes = 0
    for entry in window.entries:
        item = _item_of(session_id, entry, links, budget)
        if item is not None and budget and len(item) <= budget:
            if batch_bytes + len(item) > budget:
                yield _wire(response, "entries", b"".join(batch))
                batch = []
                batch_bytes = 0
            batch.append(item)
            batch_bytes += len(item)
            continue
        if batch_bytes:
            yield _wire(response, "entries", b"".join(batch))
            batch = []
            batch_bytes = 0
        if item is not None and isinstance(entry, EncodedEntry):
            yield _wire(response, "entry", _entry_of(item))
            continue
        assert isinstance(entry, (ServedLine, HeldBack))
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
