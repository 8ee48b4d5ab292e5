"""The textual line stripper (CONTRACT section 3).

`strip_line` cuts every base64 payload string value whose raw text is at least
the inline limit out of one transcript line, by byte offsets, while scanning
the line. A payload never becomes a Python `str` or a JSON value: it is located
with `bytes.find`, checked with a validating base64 decode and, where it holds
escapes, a bytes regex, and hashed for its pin, all on the raw bytes; nothing
made from it outlives the call. The marker stands where each payload was.

Only the small remainder of the line is parsed (orjson), with a per-call
random placeholder in each cut, so that the image-enumeration walk learns
exactly which image block lost which payload, whatever the key order, spacing
or escapes of the line.
"""

from __future__ import annotations

import binascii
import json
import mmap
import os
import re
from dataclasses import dataclass
from typing import Any

import orjson
import pybase64
import xxhash

from scrollback.contract.enumeration import image_source_field, iter_image_blocks
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER_BYTES

# What the scanner reads: the line's bytes, or a memory map of it.
Buffer = bytes | mmap.mmap

DEFAULT_INLINE_LIMIT = 32 * 1024
MIN_INLINE_LIMIT = 1024
DEFAULT_MAX_LINE_SIZE = 16 * 1024 * 1024

_QUOTE = 0x22
_BACKSLASH = 0x5C
_COLON = 0x3A
_JSON_WHITESPACE = b" \t\r\n"
# Base64 alphabet, raw; and with the JSON escapes that decode into it.
_ALPHABET_RUN = re.compile(rb"[A-Za-z0-9+/=]*")
_ESCAPED_ALPHABET_RUN = re.compile(
    rb"(?:[A-Za-z0-9+/=]|\\/|\\u00(?:2[bBfF]|3[0-9dD]|4[1-9a-fA-F]|5[0-9aA]|6[1-9a-fA-F]|7[0-9aA]))*"
)


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


@dataclass(frozen=True, slots=True)
class StrippedLine:
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


def pin_of(raw_payload: bytes | memoryview) -> str:
    """The pin of a payload: xxh3-128 of its raw text, 32 lowercase hex."""
    return xxhash.xxh3_128_hexdigest(raw_payload)


# Validation runs in slices whose length is a multiple of 4, so a megabyte
# payload never costs a megabyte-sized transient decode.
_VALIDATE_SLICE = 256 * 1024


def is_payload(line: Buffer, start: int, end: int) -> bool:
    """True if line[start:end] (a string's raw text) decodes to base64 characters only."""
    view = memoryview(line)
    try:
        # SIMD validation at GB/s; the decoded slices are dropped at once. A
        # slice passes only if it is all base64 characters, so all slices
        # passing means the whole text is.
        for at in range(start, end, _VALIDATE_SLICE):
            pybase64.b64decode(view[at : min(at + _VALIDATE_SLICE, end)], validate=True)
        return True
    except (binascii.Error, ValueError):
        pass
    finally:
        view.release()
    # Valid alphabet but odd padding, or escapes such as \/ and \u002F.
    if line.find(b"\\", start, end) < 0:
        return _ALPHABET_RUN.fullmatch(line, start, end) is not None
    return _ESCAPED_ALPHABET_RUN.fullmatch(line, start, end) is not None


def _validated_run_end(line: Buffer, view: memoryview, start: int) -> int:
    """Where a pure-base64 string starting at `start` closes, or -1.

    Validates forward in slices; the first slice that fails must hold the
    closing quote, with base64 characters only before it. So a payload's end
    is found by the same pass that validates it, not by a separate scan. Any
    other shape (escapes, odd padding, no quote) answers -1 and the caller
    takes the exact path.
    """
    size = len(line)
    position = start
    while position < size:
        end = min(position + _VALIDATE_SLICE, size)
        try:
            pybase64.b64decode(view[position:end], validate=True)
            position = end
            continue
        except (binascii.Error, ValueError):
            pass
        quote = line.find(b'"', position, end)
        if quote < 0:
            return -1
        if quote > position:
            try:
                pybase64.b64decode(view[position:quote], validate=True)
            except (binascii.Error, ValueError):
                return -1
        return quote
    return -1


def _is_key(line: Buffer, closing: int) -> bool:
    """True if the string closing at `closing` is an object key (a colon follows)."""
    size = len(line)
    after = closing + 1
    while after < size and line[after] in _JSON_WHITESPACE:
        after += 1
    return after < size and line[after] == _COLON


def find_payload_spans(
    line: Buffer, inline_limit: int, *, validate: bool = True
) -> list[tuple[int, int]]:
    """Return (start, end) of the raw text of every payload string value.

    Strings are tokenized exactly as a JSON parser would: outside a string the
    next quote opens one; inside, the first quote preceded by an even run of
    backslashes closes it. Only strings whose raw text is at least
    `inline_limit` bytes are examined further. With `validate=False` every
    such string value is returned unchecked: the extractor checks only the one
    payload it decodes (see `is_payload`).
    """
    spans: list[tuple[int, int]] = []
    if len(line) < inline_limit + 2:
        return spans
    find = line.find
    size = len(line)
    position = 0
    with memoryview(line) as view:
        while True:
            opening = find(b'"', position)
            if opening < 0:
                break
            if (
                opening + 1 + inline_limit <= size
                and find(b'"', opening + 1, opening + 1 + inline_limit) < 0
            ):
                # Long enough to be a payload: the fast path validates it and
                # finds its closing quote in one pass.
                closing = _validated_run_end(line, view, opening + 1)
                if closing >= 0 and not _is_key(line, closing):
                    spans.append((opening + 1, closing))
                    position = closing + 1
                    continue
            closing = find(b'"', opening + 1)
            while closing > 0 and line[closing - 1] == _BACKSLASH:
                run_start = closing - 1
                while line[run_start - 1] == _BACKSLASH and run_start - 1 > opening:
                    run_start -= 1
                if (closing - run_start) % 2 == 0:
                    break
                closing = find(b'"', closing + 1)
            if closing < 0:
                break  # an unterminated string: the line is not JSON; nothing more to cut
            if (
                closing - opening - 1 >= inline_limit
                and not _is_key(line, closing)
                and (not validate or is_payload(line, opening + 1, closing))
            ):
                spans.append((opening + 1, closing))
            position = closing + 1
    return spans


def _strict_constant(name: str) -> Any:
    raise ValueError("not JSON")


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
            value = json.loads(text.decode("utf-8"), parse_constant=_strict_constant)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _top_level_string(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    return value if isinstance(value, str) else ""


def oversize_stub(
    line_size: int, *, uuid: str = "", entry_type: str = "", timestamp: str = ""
) -> bytes:
    """The stub entry served for a line over the max line size after stripping."""
    stub: dict[str, Any] = {}
    if entry_type:
        stub["type"] = entry_type
    if uuid:
        stub["uuid"] = uuid
    if timestamp:
        stub["timestamp"] = timestamp
    text = f"[message too large to display: ~{max(1, round(line_size / 1024))} KB]"
    stub["message"] = {"content": [{"type": "text", "text": text}]}
    stub["scrollbackOversize"] = True
    return orjson.dumps(stub)


def strip_line(
    line: Buffer,
    inline_limit: int = DEFAULT_INLINE_LIMIT,
    max_line_size: int = DEFAULT_MAX_LINE_SIZE,
    *,
    validate_payloads: bool = True,
) -> StrippedLine | None:
    """Strip one line (without its newline). Return None if it is not a JSON object.

    `line` is `bytes`, or an `mmap` of the line, so that a line over the max
    line size is scanned without being read into memory. A line still over
    `max_line_size` after stripping becomes the oversize stub, unparsed.
    `validate_payloads=False` is the extractor's mode: long string values are
    cut unchecked, so the line's `json` is only fit for locating images.
    Never raises for any input bytes.
    """
    spans = find_payload_spans(line, inline_limit, validate=validate_payloads)
    stripped_size = len(line) - sum(end - start for start, end in spans)
    stripped_size += len(spans) * len(STRIPPED_MEDIA_MARKER_BYTES)
    if stripped_size > max_line_size:
        # Too large even without its payloads: never parsed, never held whole.
        return StrippedLine(
            json=oversize_stub(len(line)),
            uuid="",
            type="",
            timestamp="",
            images=(),
            failed_image_indexes=(),
            image_count=0,
            cut_count=len(spans),
            oversize=True,
        )
    if not spans:
        probe = stripped = bytes(line)
        placeholders: dict[str, int] = {}
    else:
        # A random per-call tag: no line can contain it by design or by chance.
        tag = os.urandom(16).hex()
        placeholders = {f"{tag}:{k}": k for k in range(len(spans))}
        kept: list[bytes] = []
        previous = 0
        for start, end in spans:
            kept.append(line[previous:start])
            previous = end
        kept.append(line[previous:])
        stripped = STRIPPED_MEDIA_MARKER_BYTES.join(kept)
        probe_parts: list[bytes] = [kept[0]]
        for k, part in enumerate(kept[1:]):
            probe_parts.append(f"{tag}:{k}".encode("ascii"))
            probe_parts.append(part)
        probe = b"".join(probe_parts)
    entry = parse_json_object(probe)
    if entry is None:
        return None

    images: list[StrippedImage] = []
    failed: list[int] = []
    index = -1
    for index, block in enumerate(iter_image_blocks(entry)):
        data = image_source_field(block, "data")
        if not isinstance(data, str):
            continue
        if data == "":
            failed.append(index)
            continue
        cut = placeholders.get(data)
        if cut is None:
            continue  # a small inline image, or a marker already in the line
        start, end = spans[cut]
        media_type = image_source_field(block, "media_type")
        images.append(
            StrippedImage(
                index=index,
                pin=pin_of(memoryview(line)[start:end]),
                declared_media_type=media_type if isinstance(media_type, str) else "",
                raw_start=start,
                raw_end=end,
            )
        )
    uuid = _top_level_string(entry, "uuid")
    entry_type = _top_level_string(entry, "type")
    timestamp = _top_level_string(entry, "timestamp")
    return StrippedLine(
        json=stripped,
        uuid=uuid,
        type=entry_type,
        timestamp=timestamp,
        images=tuple(images),
        failed_image_indexes=tuple(failed),
        image_count=index + 1,
        cut_count=len(spans),
        oversize=False,
    )
