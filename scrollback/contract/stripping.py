"""The textual line stripper (docs/contract.md §3).

`strip_line` cuts every base64 payload string value whose raw text is at least
the inline limit out of one transcript line, by byte offsets, while scanning
the line. A payload never becomes a Python `str` or a JSON value: it is located
by its quotes, checked to hold base64 characters only and hashed for its pin,
all on the raw bytes (scrollback.contract.payload_scan); nothing made from it
outlives the call. The marker stands where each payload was.

Only the small remainder of the line is parsed (orjson), with a per-call
random placeholder in each cut, so that the image-enumeration walk learns
exactly which image block lost which payload, whatever the key order, spacing
or escapes of the line. `probe_line` gives that parsed remainder with the
means to map it back to the line (for slim copies).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from scrollback.contract.enumeration import is_gemini_message, is_rollout_entry, iter_images
from scrollback.contract.limits import DEFAULT_INLINE_LIMIT as DEFAULT_INLINE_LIMIT
from scrollback.contract.limits import DEFAULT_MAX_LINE_SIZE as DEFAULT_MAX_LINE_SIZE
from scrollback.contract.limits import MIN_INLINE_LIMIT as MIN_INLINE_LIMIT
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER_BYTES
from scrollback.contract.payload_scan import Buffer, payload_spans, streamed_payloads
from scrollback.contract.payload_scan import find_payload_spans as find_payload_spans
from scrollback.contract.payload_scan import first_payload_candidate as first_payload_candidate
from scrollback.contract.payload_scan import pin_of as pin_of
from scrollback.contract.reading import ByteReader
from scrollback.contract.top_level import TOP_LEVEL_WINDOW, looks_like_object, top_level_strings


@dataclass(frozen=True, slots=True)
class StrippedImage:
    """An image block whose payload was cut: what a media reference needs."""

    index: int
    pin: str
    declared_media_type: str
    raw_start: int
    raw_end: int

    @property
    def raw_length(self) -> int:
        """Length of the payload's raw text (escapes as written)."""
        return self.raw_end - self.raw_start

    @property
    def approx_size_bytes(self) -> int:
        """Approximate decoded size: three quarters of the raw length."""
        return self.raw_length * 3 // 4


# A NamedTuple, not a frozen dataclass: one is built for every line read, and a
# frozen dataclass's __init__ costs about a microsecond more.
class StrippedLine(NamedTuple):
    """One transcript line after stripping.

    `json` is the stripped line (or the oversize stub); the other fields are
    read from the line's top level, empty where absent or not strings.
    """

    json: bytes
    uuid: str
    type: str
    timestamp: str
    images: tuple[StrippedImage, ...]
    failed_image_indexes: tuple[int, ...]
    image_count: int
    cut_count: int
    oversize: bool


def _no_pin(start: int, end: int) -> str:
    """The pin source of a line with nothing cut: never asked (no image lost a payload)."""
    raise AssertionError("no payload was cut from this line")


def _strict_constant(name: str) -> Any:
    raise ValueError("not JSON")


# Built once: json.loads with an argument builds a new decoder on every call.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_strict_constant)


def parse_json_object(text: bytes) -> dict[str, Any] | None:
    """Parse one line; return the object, or None if it is not a JSON object.

    orjson first; the standard library only when orjson refuses, because real
    transcripts (written by JavaScript) can hold lone surrogate escapes that
    are valid JSON but that orjson rejects. The fallback decodes strict UTF-8
    itself: `json.loads(bytes)` would also accept UTF-16/32, a BOM and
    UTF-8-encoded surrogates, none of which is a UTF-8 JSON text.
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            value = _STRICT_DECODER.decode(text.decode("utf-8"))
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


_STUB_KEYS = frozenset({"uuid", "type", "timestamp"})


def oversize_line(
    line_size: int, read: ByteReader | None = None, cut_count: int = 0
) -> StrippedLine | None:
    """The stub entry served for a line over the max line size after stripping.

    The line is never parsed whole: with `read` (bounded reads of the line),
    its top-level `uuid`, `type` and `timestamp` are found textually in a
    bounded prefix and suffix and kept on the stub, and a line that is not
    framed as a JSON object (`{` ... `}`) is None, skipped like any non-object
    line. Without `read` the stub carries no fields.
    """
    fields: dict[str, str] = {}
    if read is not None:
        window = min(line_size, TOP_LEVEL_WINDOW)
        if not looks_like_object(read(0, window), read(line_size - window, window)):
            return None
        fields = top_level_strings(read, line_size, _STUB_KEYS)
    text = f"[message too large to display: ~{max(1, round(line_size / 1024))} KB]"
    stub: dict[str, Any] = dict(fields)
    stub["message"] = {"content": [{"type": "text", "text": text}]}
    stub["scrollbackOversize"] = True
    return StrippedLine(
        # ASCII-escaped: a lone surrogate escape in a field stays an escape.
        json=json.dumps(stub, separators=(",", ":")).encode("ascii"),
        uuid=fields.get("uuid", ""),
        type=fields.get("type", ""),
        timestamp=fields.get("timestamp", ""),
        images=(),
        failed_image_indexes=(),
        image_count=0,
        cut_count=cut_count,
        oversize=True,
    )


def strip_line(
    line: Buffer,
    inline_limit: int = DEFAULT_INLINE_LIMIT,
    max_line_size: int = DEFAULT_MAX_LINE_SIZE,
    *,
    validate_payloads: bool = True,
) -> StrippedLine | None:
    """Strip one line (without its newline). Return None if it is not a JSON object.

    `line` is `bytes` (or an `mmap` of it). A line still over `max_line_size`
    after stripping becomes the oversize stub, unparsed. A line too large to
    hold goes through `strip_line_streamed` instead, to the same result.
    `validate_payloads=False` is the extractor's mode: long string values are
    cut unchecked, so the line's `json` is only fit for locating images.
    Never raises for any input bytes.
    """
    if len(line) < inline_limit + 2 and len(line) <= max_line_size:
        # Too short to hold a payload, as most lines are: straight to the reading.
        text = bytes(line)
        return _read_entry(text, text, {}, [], _no_pin)
    pins: dict[tuple[int, int], str] = {}
    spans = payload_spans(line, inline_limit, validate_payloads, pins)
    if not spans and len(line) <= max_line_size:
        text = bytes(line)  # nothing cut, as in most lines: the line is its own stripped text
        return _read_entry(text, text, {}, spans, _no_pin)

    def pin(start: int, end: int) -> str:
        # Computed while validating on the fast path; hashed here otherwise.
        known = pins.get((start, end))
        if known is not None:
            return known
        with memoryview(line) as view:
            return pin_of(view[start:end])

    return _assemble(len(line), spans, lambda start, end: line[start:end], pin, max_line_size)


STREAM_CHUNK = 1024 * 1024


def strip_line_streamed(
    read: ByteReader,
    size: int,
    inline_limit: int = DEFAULT_INLINE_LIMIT,
    max_line_size: int = DEFAULT_MAX_LINE_SIZE,
    *,
    chunk_size: int = STREAM_CHUNK,
) -> StrippedLine | None:
    """`strip_line` for a line of `size` bytes too large to hold: read in chunks.

    The same tokenizing rules find the long string values in one pass; each is
    then checked and pinned in a second pass of bounded reads; only the kept
    text (at most `max_line_size`) is ever held. The result equals
    `strip_line` of the same bytes.
    """
    spans: list[tuple[int, int]] = []
    pins: dict[tuple[int, int], str] = {}
    for start, end, pin in streamed_payloads(read, size, inline_limit, chunk_size):
        spans.append((start, end))
        pins[(start, end)] = pin
    return _assemble(
        size,
        spans,
        lambda start, end: read(start, end - start),
        lambda start, end: pins[(start, end)],
        max_line_size,
    )


def _assemble(
    size: int,
    spans: list[tuple[int, int]],
    segment: Callable[[int, int], bytes],
    pin: Callable[[int, int], str],
    max_line_size: int,
) -> StrippedLine | None:
    """Build the stripped line from the kept segments, then read it (`_read_entry`)."""
    stripped_size = size
    for start, end in spans:
        stripped_size -= end - start - len(STRIPPED_MEDIA_MARKER_BYTES)
    if stripped_size > max_line_size:
        # Too large even without its payloads: never parsed, never held whole.
        return oversize_line(
            size, lambda start, length: bytes(segment(start, start + length)), len(spans)
        )
    placeholders: dict[str, int] = {}
    if not spans:
        probe = stripped = bytes(segment(0, size))
    else:
        # A random per-call tag: no line can contain it by design or by chance.
        tag = os.urandom(16).hex()
        kept: list[bytes] = []
        probe_parts: list[bytes] = []
        previous = 0
        for k, (start, end) in enumerate(spans):
            part = segment(previous, start)
            placeholder = f"{tag}:{k}"
            placeholders[placeholder] = k
            kept.append(part)
            probe_parts += (part, placeholder.encode("ascii"))
            previous = end
        part = segment(previous, size)
        kept.append(part)
        probe_parts.append(part)
        stripped = STRIPPED_MEDIA_MARKER_BYTES.join(kept)
        probe = b"".join(probe_parts)
    return _read_entry(stripped, probe, placeholders, spans, pin)


def _read_entry(
    stripped: bytes,
    probe: bytes,
    placeholders: dict[str, int],
    spans: list[tuple[int, int]],
    pin: Callable[[int, int], str],
) -> StrippedLine | None:
    """Parse the probe (the stripped line with each cut's placeholder where the
    marker stands) and enumerate its images: the cut `spans[k]` is the image
    whose data reads `placeholders`' key for k."""
    entry = parse_json_object(probe)
    if entry is None:
        return None
    uuid, type_, timestamp = entry.get("uuid"), entry.get("type"), entry.get("timestamp")
    if uuid is None and is_gemini_message(entry):
        uuid = entry["id"]  # a Gemini message is named by its id (docs/contract.md §2)
    if _holds_no_image(entry):
        # Most lines are plain text turns: they skip the enumeration walk's
        # generators, a large share of what such a line costs once parsed.
        return StrippedLine(
            stripped,
            uuid if isinstance(uuid, str) else "",
            type_ if isinstance(type_, str) else "",
            timestamp if isinstance(timestamp, str) else "",
            (),
            (),
            0,
            len(spans),
            False,
        )

    images: list[StrippedImage] = []
    failed: list[int] = []
    index = -1
    found = iter_images(entry)
    if _no_data_url(probe) and is_rollout_entry(entry):
        # A rollout line's images are data URLs, so one whose text has no ";base64," (and no
        # escape that could spell it) has none: its strings are not walked.
        found = iter(())
    for index, (data, media_type) in enumerate(found):
        if not isinstance(data, str):
            continue
        if data == "":
            failed.append(index)
            continue
        cut = placeholders.get(data)
        if cut is None:
            continue  # a small inline image, or a marker already in the line
        start, end = spans[cut]
        images.append(
            StrippedImage(
                index=index,
                pin=pin(start, end),
                declared_media_type=media_type if isinstance(media_type, str) else "",
                raw_start=start,
                raw_end=end,
            )
        )
    # Positional, in the field order (json, uuid, type, timestamp, images,
    # failed_image_indexes, image_count, cut_count, oversize): built for every
    # line read, and keywords cost half as much again as the rest of this.
    return StrippedLine(
        stripped,
        uuid if isinstance(uuid, str) else "",
        type_ if isinstance(type_, str) else "",
        timestamp if isinstance(timestamp, str) else "",
        tuple(images),
        tuple(failed),
        index + 1,
        len(spans),
        False,
    )


def _no_data_url(text: bytes) -> bool:
    """True if no string of this JSON text can be a base64 data URL."""
    return b";base64," not in text and b"\\u" not in text


def _holds_no_image(entry: dict[str, Any]) -> bool:
    """True if `iter_images` would yield nothing for the entry, told from its message's
    top-level blocks alone: no block is an image or holds blocks of its own. False
    where only the whole walk can tell (a rollout line, nested content)."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return "message" in entry  # a rollout line has no `message` member
    content = message.get("content")
    if not isinstance(content, list):
        return True
    for block in content:
        if isinstance(block, dict) and (block.get("type") == "image" or "content" in block):
            return False
    return True


class ProbedLine(NamedTuple):
    """A line with its payloads cut, parsed, and the means to map back to the line.

    `probe` is the line with each cut payload's raw text replaced by a unique
    placeholder (`placeholders[k]` stands for `spans[k]`); `entry` is the probe
    parsed. Offsets in the probe map back to offsets in the line
    (`line_offset`) because only the cut spans changed length.
    """

    entry: dict[str, Any]
    probe: bytes
    spans: list[tuple[int, int]]
    placeholders: list[str]
    pins: list[str]

    def line_offset(self, probe_offset: int) -> int:
        """The line offset of a probe offset that lies outside every placeholder."""
        shift = 0
        for k, (start, end) in enumerate(self.spans):
            if probe_offset <= start - shift:
                break  # this cut and the ones after it lie beyond the offset
            shift += (end - start) - len(self.placeholders[k])
        return probe_offset + shift

    def span_of(self, placeholder: str) -> int:
        """The index k of the cut a placeholder stands for, or -1."""
        try:
            return self.placeholders.index(placeholder)
        except ValueError:
            return -1


def _probe_of(
    size: int, spans: list[tuple[int, int]], segment: Callable[[int, int], bytes]
) -> tuple[bytes, list[str]]:
    """The probe text of a line (each cut replaced by a per-call placeholder) and the placeholders."""
    if not spans:
        return bytes(segment(0, size)), []
    tag = os.urandom(16).hex()
    placeholders = [f"{tag}:{k}" for k in range(len(spans))]
    parts: list[bytes] = []
    previous = 0
    for k, (start, end) in enumerate(spans):
        parts += (bytes(segment(previous, start)), placeholders[k].encode("ascii"))
        previous = end
    parts.append(bytes(segment(previous, size)))
    return b"".join(parts), placeholders


def probe_line(line: Buffer, inline_limit: int = MIN_INLINE_LIMIT) -> ProbedLine | None:
    """Cut a held line's payloads (as `strip_line` finds them) and parse the rest.

    None if the line is not a JSON object. The payloads are pinned, never parsed.
    """
    pins: dict[tuple[int, int], str] = {}
    spans = payload_spans(line, inline_limit, True, pins)
    probe, placeholders = _probe_of(len(line), spans, lambda start, end: line[start:end])
    entry = parse_json_object(probe)
    if entry is None:
        return None
    with memoryview(line) as view:
        pin_list = [pins.get(span) or pin_of(view[span[0] : span[1]]) for span in spans]
    return ProbedLine(entry, probe, spans, placeholders, pin_list)


def probe_line_streamed(
    read: ByteReader,
    size: int,
    inline_limit: int = MIN_INLINE_LIMIT,
    max_kept: int = DEFAULT_MAX_LINE_SIZE,
    *,
    chunk_size: int = STREAM_CHUNK,
) -> ProbedLine | None:
    """`probe_line` for a line too large to hold, read in bounded chunks.

    None if the line is not a JSON object, or if what is left once its
    payloads are cut is still over `max_kept` (it is never held whole).
    """
    probed = probe_line_sized(read, size, inline_limit, max_kept, chunk_size=chunk_size)
    return probed if isinstance(probed, ProbedLine) else None


@dataclass(frozen=True, slots=True)
class StillTooLarge:
    """A line whose remainder, once its payloads are cut, is over the bound asked for."""

    kept: int


def probe_line_sized(
    read: ByteReader,
    size: int,
    inline_limit: int = MIN_INLINE_LIMIT,
    max_kept: int = DEFAULT_MAX_LINE_SIZE,
    *,
    chunk_size: int = STREAM_CHUNK,
) -> ProbedLine | StillTooLarge | None:
    """`probe_line_streamed`, telling a line still over `max_kept` once stripped (never
    parsed) from one that is not a JSON object (None)."""
    spans: list[tuple[int, int]] = []
    pins: list[str] = []
    for start, end, pin in streamed_payloads(read, size, inline_limit, chunk_size):
        spans.append((start, end))
        pins.append(pin)
    kept = size - sum(end - start for start, end in spans)
    if kept > max_kept:
        return StillTooLarge(kept)
    probe, placeholders = _probe_of(size, spans, lambda start, end: read(start, end - start))
    entry = parse_json_object(probe)
    if entry is None:
        return None
    return ProbedLine(entry, probe, spans, placeholders, pins)
