"""Slim copies of a Gemini CLI session (`scrollback slim`, SlimSession; docs/contract.md §14).

The copy is a session file in Gemini's own format, as gemini-cli writes one
(its header, then one line per message) that holds the session as Gemini shows
it now: its live messages (scrollback.gemini_live), each with every
`inlineData` part replaced by a text part that says what was cut (the image's
type, size, pixels, and the ref, pin and sha256 by which Scrollback still
serves it), and every other base64 payload replaced inside its string by the
same kind of text. Superseded versions, rewound messages, checkpoints and
metadata updates are not copied: the copy's header carries the metadata as it
stands. Images are never downscaled in a Gemini copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from history_service.lines import is_blank, iter_lines_forward
from history_service.slim import SlimOptions, SlimStats
from history_service.slim_blocks import (
    OUT_CHUNK,
    LineSource,
    PayloadFacts,
    facts_of,
    inline_facts,
    stand_in_text,
)
from scrollback.contract.enumeration import is_gemini_message
from scrollback.contract.extraction import iter_decoded
from scrollback.contract.refs import entry_name
from scrollback.contract.stripping import ProbedLine
from scrollback.gemini_live import LiveView
from scrollback.linefile import ByteSource

# The header members a copy keeps, as gemini-cli's first line has them.
_HEADER_KEYS = ("projectHash", "startTime", "lastUpdated", "summary", "kind")


def _header(fd: ByteSource, copy_id: str) -> bytes:
    """The copy's first line: the session's metadata as it stands, under the copy's id."""
    metadata = fd.scan.metadata if isinstance(fd, LiveView) else {}
    header: dict[str, Any] = {"sessionId": copy_id}
    for key in _HEADER_KEYS:
        if key in metadata:
            header[key] = metadata[key]
    return orjson.dumps(header) + b"\n"


def _facts(source: LineSource, probed: ProbedLine, data: Any, index: int) -> PayloadFacts | None:
    cut = probed.span_of(data) if isinstance(data, str) else -1
    if cut >= 0:
        start, end = probed.spans[cut]
        return facts_of(iter_decoded(source.read, start, end, max(index, 0)), False)[0]
    if isinstance(data, str):
        return inline_facts(data, False)[0]
    return None


def _replace_parts(
    entry: dict[str, Any],
    source: LineSource,
    probed: ProbedLine,
    name: str,
    stats: SlimStats,
) -> None:
    """Every `inlineData` part of the entry replaced, in place, by a text part."""
    index = 0
    stack: list[Any] = [entry]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(reversed(value))
            continue
        if not isinstance(value, dict):
            continue
        inline = value.get("inlineData")
        if not isinstance(inline, dict):
            stack.extend(reversed(list(value.values())))
            continue
        media_type = inline.get("mimeType")
        declared = media_type if isinstance(media_type, str) else ""
        image = declared[:6].lower() == "image/"
        data = inline.get("data")
        facts = _facts(source, probed, data, index if image else -1)
        ref = pin = ""
        cut = probed.span_of(data) if isinstance(data, str) else -1
        if image and cut >= 0:
            ref, pin = f"{name}/{index}", probed.pins[cut]
        kind = "image" if image else "document"
        value.clear()
        value["text"] = stand_in_text(kind, declared, facts, ref, pin)
        if image:
            index += 1
            stats.images_replaced += 1
        else:
            stats.documents_replaced += 1


def _replace_payloads(value: Any, probed: ProbedLine, stats: SlimStats) -> Any:
    """Any payload still standing in a string (a placeholder) replaced by a note."""
    if isinstance(value, str):
        for placeholder in probed.placeholders:
            if placeholder in value:
                stats.copies_replaced += 1
                value = value.replace(placeholder, "[payload cut by scrollback slim]")
        return value
    if isinstance(value, list):
        return [_replace_payloads(item, probed, stats) for item in value]
    if isinstance(value, dict):
        return {k: _replace_payloads(v, probed, stats) for k, v in value.items()}
    return value


def slim_gemini_file(
    fd: ByteSource,
    size: int,
    session_id: str,
    options: SlimOptions,
    max_line: int,
    stats: SlimStats,
) -> Iterator[bytes]:
    """The slim copy of a Gemini session read as its live messages, in pieces of at most
    OUT_CHUNK (see the module's text)."""
    copy_id = options.fork_session_id or (
        fd.scan.metadata.get("sessionId", "") if isinstance(fd, LiveView) else ""
    )
    out = bytearray(_header(fd, str(copy_id)))
    for raw in iter_lines_forward(fd, 0, size, max_line):
        stats.bytes_read += raw.next_start - raw.start
        if is_blank(raw):
            continue
        source = LineSource(raw)
        probed = source.probe_sized()
        if not isinstance(probed, ProbedLine) or not is_gemini_message(probed.entry):
            continue
        entry = probed.entry
        name = f"{session_id}/{entry_name(entry['id'], raw.start)}"
        _replace_parts(entry, source, probed, name, stats)
        out += orjson.dumps(_replace_payloads(entry, probed, stats)) + b"\n"
        stats.lines += 1
        while len(out) >= OUT_CHUNK:
            yield _take(out, OUT_CHUNK, stats)
    while out:
        yield _take(out, OUT_CHUNK, stats)


def _take(out: bytearray, size: int, stats: SlimStats) -> bytes:
    piece = bytes(out[:size])
    del out[:size]
    stats.bytes_written += len(piece)
    return piece
