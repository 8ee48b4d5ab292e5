"""The image and document blocks of one transcript line, for slim copies and the image list.

A line is probed, never parsed whole (`LineSource.probe`: its payloads are cut
by the stripper, docs/contract.md §3, and its small remainder parsed); its
blocks are found in the remainder (`media_blocks`), each payload decoded once
for its size, sha256 and header (`block_facts`), and a cut block is described
by its stand-in text (`stand_in_text`), naming the ref the media service
serves it by (`block_ref`: the entry named as ReadWindow names it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pybase64

from history_service.lines import FileShrankError
from scrollback.contract.blocks import iter_objects
from scrollback.contract.data_url import is_image_media_type, split_data_url
from scrollback.contract.enumeration import is_rollout_entry, iter_image_blocks
from scrollback.contract.extraction import UndecodablePayloadError, iter_decoded
from scrollback.contract.image_header import ImageHeader, read_header
from scrollback.contract.reading import ByteReader
from scrollback.contract.refs import entry_name
from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    ProbedLine,
    StillTooLarge,
    probe_line,
    probe_line_sized,
)
from scrollback.linefile import LineFile
from scrollback.linewalk import RawLine

# Output is sent in pieces of at most this size.
OUT_CHUNK = 1024 * 1024
MEDIA_KINDS = ("image", "document")

# A 1x1 transparent PNG: the payload left in a data URL whose image was cut elsewhere.
BLANK_PNG_BASE64 = b"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

# The decoded bytes of a payload kept for its header: a JPEG's frame header
# after large EXIF blocks, and the fixed headers of the other formats.
HEADER_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class PayloadFacts:
    """What a payload's decoded bytes are: size, sha256, header; or undecodable."""

    size_bytes: int
    sha256: str
    header: ImageHeader | None
    decodable: bool


def facts_of(pieces: Iterator[bytes], keep: bool) -> tuple[PayloadFacts, bytes | None]:
    """Hash decoded pieces; the header from the first bytes; the whole bytes if `keep`."""
    digest = hashlib.sha256()
    head = bytearray()
    whole = bytearray() if keep else None
    size = 0
    try:
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
            if len(head) < HEADER_BYTES:
                head += piece[: HEADER_BYTES - len(head)]
            if whole is not None:
                whole += piece
    except (UndecodablePayloadError, LookupError, binascii.Error, ValueError):
        return PayloadFacts(size, "", None, False), None
    facts = PayloadFacts(size, digest.hexdigest(), read_header(io.BytesIO(head)), True)
    return facts, bytes(whole) if whole is not None else None


def inline_facts(data: str, keep: bool) -> tuple[PayloadFacts, bytes | None]:
    """Facts of a payload small enough that it stayed in the parsed remainder."""
    try:
        decoded: bytes = pybase64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return PayloadFacts(0, "", None, False), None
    return facts_of(iter((decoded,)), keep)


@dataclass(slots=True)
class FoundBlock:
    """One image or document block of a line."""

    block: dict[str, Any]
    kind: str
    cut: int  # the probe's cut holding its data, or -1 when the data stayed inline
    image_index: int  # its index by the enumeration rule (docs/contract.md §2), or -1
    content_path: tuple[int, ...]  # indexes in message.content (and nested content), or ()
    facts: PayloadFacts | None = None
    data: bytes | None = None


def _is_media_block(value: dict[str, Any]) -> bool:
    source = value.get("source")
    return (
        value.get("type") in MEDIA_KINDS
        and isinstance(source, dict)
        and isinstance(source.get("data"), str)
    )


def _content_paths(entry: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """id(block) -> its path in message.content, descending into `content` arrays (§2's walk)."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    paths: dict[int, tuple[int, ...]] = {}
    if not isinstance(content, list):
        return paths
    stack: list[tuple[tuple[int, ...], list[Any]]] = [((), content)]
    while stack:
        prefix, items = stack.pop()
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            path = (*prefix, position)
            paths[id(item)] = path
            inner = item.get("content")
            if isinstance(inner, list):
                stack.append((path, inner))
    return paths


def rollout_url(block: dict[str, Any]) -> tuple[str, str] | None:
    """(declared media type, payload text) of a Codex image item, `{"type": "input_image",
    "image_url": "data:...;base64,..."}`; None for any other block."""
    url = block.get("image_url")
    if block.get("type") != "input_image" or not isinstance(url, str):
        return None
    split = split_data_url(url)
    return split if split is not None and is_image_media_type(split[0]) else None


def strings_with_parents(value: Any) -> Iterator[tuple[str, Any]]:
    """Every string under `value` with the dict or list holding it, in the order of the
    enumeration's walk of a rollout payload (scrollback.contract.enumeration)."""
    stack: list[tuple[Any, Iterator[Any]]] = [(None, iter((value,)))]
    while stack:
        parent, items = stack[-1]
        for item in items:
            if isinstance(item, str):
                yield item, parent
            elif isinstance(item, dict):
                stack.append((item, iter(item.values())))
                break
            elif isinstance(item, list):
                stack.append((item, iter(item)))
                break
        else:
            stack.pop()


def _rollout_blocks(probed: ProbedLine) -> list[FoundBlock]:
    """A Codex rollout line's image items (data URLs in `input_image` items: a message's
    content, a tool output's, a compaction's history), each with its index by §2's rule
    (every image data URL of the payload counts, the event copies' plain strings too)."""
    found: list[FoundBlock] = []
    index = 0
    for text, parent in strings_with_parents(probed.entry["payload"]):
        split = split_data_url(text)
        if split is None or not is_image_media_type(split[0]):
            continue
        if isinstance(parent, dict) and parent.get("image_url") is text and rollout_url(parent):
            # No API position is known for a rollout: the index alone names the item.
            found.append(FoundBlock(parent, "image", probed.span_of(split[1]), index, (index,)))
        index += 1
    return found


def media_blocks(probed: ProbedLine) -> list[FoundBlock]:
    """Every image and document block of a probed line, in document order."""
    entry = probed.entry
    if is_rollout_entry(entry):
        return _rollout_blocks(probed)
    indexes = {id(block): i for i, block in enumerate(iter_image_blocks(entry))}
    paths = _content_paths(entry)
    found: list[FoundBlock] = []
    skip: set[int] = set()
    for obj in iter_objects(entry):
        if id(obj) in skip or not _is_media_block(obj):
            continue
        source = obj["source"]
        skip.add(id(source))
        found.append(
            FoundBlock(
                obj,
                str(obj["type"]),
                probed.span_of(source["data"]),
                indexes.get(id(obj), -1),
                paths.get(id(obj), ()),
            )
        )
    return found


class LineSource:
    """One line's bytes, held or read in bounded pieces from its file."""

    def __init__(self, raw: RawLine) -> None:
        self.raw = raw
        data, source = raw.data, raw.fd
        if data is not None:
            self.read: ByteReader = lambda start, length: data[start : start + length]
        elif source is not None:
            self.read = LineFile(source).line_reader(raw.start, raw.size, FileShrankError)
        else:
            raise ValueError("a line too large to hold needs its file")

    def probe(self) -> ProbedLine | None:
        """The line's payloads cut and its remainder parsed (None: not a JSON object, or
        still too large once stripped)."""
        probed = self.probe_sized()
        return probed if isinstance(probed, ProbedLine) else None

    def probe_sized(self) -> ProbedLine | StillTooLarge | None:
        """`probe`, telling a line still too large once stripped from a non-object (None)."""
        if self.raw.data is not None:
            return probe_line(self.raw.data, MIN_INLINE_LIMIT)
        return probe_line_sized(self.read, self.raw.size, MIN_INLINE_LIMIT)

    def pieces(self, start: int, end: int) -> Iterator[bytes]:
        """The line's bytes [start, end) in pieces of at most OUT_CHUNK."""
        while start < end:
            length = min(OUT_CHUNK, end - start)
            yield bytes(self.read(start, length))
            start += length


def block_facts(
    source: LineSource, probed: ProbedLine, block: FoundBlock, keep: bool = False
) -> None:
    """Decode a block's payload once: its size, sha256 and header (and bytes with `keep`)."""
    if block.cut >= 0:
        start, end = probed.spans[block.cut]
        facts, data = facts_of(iter_decoded(source.read, start, end, block.image_index), keep)
    else:
        facts, data = inline_facts(inline_payload(block.block), keep)
    block.facts, block.data = facts, data


def declared_type(block: dict[str, Any]) -> str:
    rollout = rollout_url(block)
    if rollout is not None:
        return rollout[0]
    media_type = block.get("source", {}).get("media_type")
    return media_type if isinstance(media_type, str) else ""


def inline_payload(block: dict[str, Any]) -> str:
    """The base64 text of a block whose payload stayed inline (too short to be cut)."""
    rollout = rollout_url(block)
    return rollout[1] if rollout is not None else str(block["source"]["data"])


def text_block(block: dict[str, Any], text: str) -> dict[str, Any]:
    """The text block that stands where `block` was: a Codex item's input_text, else text."""
    kind = "input_text" if rollout_url(block) is not None else "text"
    return {"type": kind, "text": text}


def with_image(block: dict[str, Any], media_type: str, data: bytes) -> dict[str, Any]:
    """`block` holding other image bytes (a downscale), in its own shape."""
    payload = base64.b64encode(data).decode()
    if rollout_url(block) is not None:
        return {**block, "image_url": f"data:{media_type};base64,{payload}"}
    source = dict(block["source"])
    source.update(type="base64", media_type=media_type, data=payload)
    return {**block, "source": source}


def stand_in_text(
    kind: str,
    declared: str,
    facts: PayloadFacts | None,
    ref: str = "",
    pin: str = "",
    reason: str = "",
) -> str:
    """The text that stands where an image or document was cut: never empty."""
    parts = [declared or "unknown type"]
    if facts is not None and facts.decodable:
        parts.append(f"{facts.size_bytes:,} bytes")
        if facts.header is not None:
            parts.append(f"{facts.header.width}x{facts.header.height} px")
    elif facts is not None:
        parts.append("undecodable")
    if reason:
        parts.append(f"not downscaled: {reason}")
    where = []
    if ref:
        where.append(f"ref {ref} pin {pin}")
    if facts is not None and facts.sha256:
        where.append(f"sha256 {facts.sha256}")
    served = f"; Scrollback still serves it: {', '.join(where)}" if where else ""
    return f"[{kind} cut by scrollback slim: {', '.join(parts)}{served}]"


def json_string_text(text: str) -> bytes:
    """`text` as the raw inside of a JSON string (ASCII, escaped as needed)."""
    return json.dumps(text)[1:-1].encode("ascii")


def dumps_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # lone surrogates in kept fields
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def block_ref(
    offset: int, session_id: str, entry: dict[str, Any], block: FoundBlock, probed: ProbedLine
) -> tuple[str, str]:
    """The ref and pin by which the media service serves a cut image; ("", "") if none.

    The entry is named as ReadWindow names it (`entry_name`): its uuid when
    usable, else `at-<offset>` of its line.
    """
    if block.kind != "image" or block.image_index < 0 or block.cut < 0:
        return "", ""
    uuid = entry.get("uuid")
    name = entry_name(uuid if isinstance(uuid, str) else "", offset)
    return f"{session_id}/{name}/{block.image_index}", probed.pins[block.cut]
