"""The textual line stripper (docs/contract.md §3).

`strip_line` cuts every base64 payload string value whose raw text is at least
the inline limit out of one transcript line, by byte offsets, while scanning
the line. A payload never becomes a Python `str` or a JSON value: it is located
by its quotes (only a quote that the next inline-limit bytes do not follow with
another can open one, `_quote_before_long_run`), checked to hold base64
characters only (`first_not_base64`, one SIMD byte-set scan) or, where it holds
escapes, a bytes regex, and hashed for its pin, all on the raw bytes; nothing
made from it outlives the call. The marker stands where each payload was.

Only the small remainder of the line is parsed (orjson), with a per-call
random placeholder in each cut, so that the image-enumeration walk learns
exactly which image block lost which payload, whatever the key order, spacing
or escapes of the line.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
import stringzilla
import xxhash

from scrollback.contract.data_url import bytes_reader, data_url_payload_start
from scrollback.contract.enumeration import iter_images
from scrollback.contract.limits import DEFAULT_INLINE_LIMIT as DEFAULT_INLINE_LIMIT
from scrollback.contract.limits import DEFAULT_MAX_LINE_SIZE as DEFAULT_MAX_LINE_SIZE
from scrollback.contract.limits import MIN_INLINE_LIMIT as MIN_INLINE_LIMIT
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER_BYTES
from scrollback.contract.reading import ByteReader
from scrollback.contract.top_level import TOP_LEVEL_WINDOW, looks_like_object, top_level_strings

# What the scanner reads: the line's bytes, or a memory map of it.
Buffer = bytes | mmap.mmap

_QUOTE = 0x22
_BACKSLASH = 0x5C
_COLON = 0x3A
_JSON_WHITESPACE = b" \t\r\n"
# The bytes a data URL's raw text can start with: `d`, or an escape of it.
_DATA_URL_FIRST = frozenset(b"d\\")
# The base64 alphabet with the JSON escapes that decode into it.
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


def pin_of(raw_payload: bytes | memoryview) -> str:
    """The pin of a payload: xxh3-128 of its raw text, 32 lowercase hex."""
    return xxhash.xxh3_128_hexdigest(raw_payload)


# A long string is checked and hashed in slices of this size, each hashed just
# after its check read it, while it is still in the CPU's caches.
_VALIDATE_SLICE = 1024 * 1024
# The base64 alphabet, as StringZilla's byte-set search takes it.
_BASE64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def first_not_base64(data: Buffer | memoryview, start: int = 0, end: int | None = None) -> int:
    """The offset of the first byte of data[start:end] outside the base64 alphabet, or -1.

    One SIMD byte-set scan (StringZilla's `find_first_not_of`), at about the
    speed of a newline search, and nothing decoded.
    """
    with memoryview(data) as view:
        text = stringzilla.Str(view)
        try:
            return _first_not_base64_in(text, start, len(view) if end is None else end)
        finally:
            del text  # the buffer is released with it, before the view


def _first_not_base64_in(text: stringzilla.Str, start: int, end: int) -> int:
    """`first_not_base64` on a StringZilla wrapper the caller already holds."""
    return int(text.find_first_not_of(_BASE64_CHARS, start, end))


def is_payload(line: Buffer, start: int, end: int) -> bool:
    """True if line[start:end] (a string's raw text) is base64 characters only, once its
    escapes (such as \\/ and \\u002F) are read."""
    if first_not_base64(line, start, end) < 0:
        return True
    return (
        line.find(b"\\", start, end) >= 0
        and _ESCAPED_ALPHABET_RUN.fullmatch(line, start, end) is not None
    )


def _validated_run(
    line: Buffer, view: memoryview, text: stringzilla.Str, start: int
) -> tuple[int, str]:
    """Where a pure-base64 string starting at `start` closes, and its pin; or (-1, "").

    One pass over the payload, as it comes from memory: slice after slice is
    searched for a byte outside the base64 alphabet and hashed into the pin
    while still in the CPU cache. A quote is not a base64 character, so the
    string closes at the first such byte if it is a quote (a backslash before
    it would have come first). Any other byte (an escape), or none before the
    line ends, answers -1 and the caller takes the exact path. `view` and
    `text` are the line as a memoryview and as StringZilla's wrapper of it.
    """
    digest = xxhash.xxh3_128()
    size = len(line)
    position = start
    while position < size:
        end = min(position + _VALIDATE_SLICE, size)
        stop = _first_not_base64_in(text, position, end)
        if stop >= 0:
            if line[stop] != _QUOTE:
                return -1, ""
            digest.update(view[position:stop])
            return stop, digest.hexdigest()
        digest.update(view[position:end])
        position = end
    return -1, ""


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
    return _payload_spans(line, inline_limit, validate, {})


def _payload_spans(
    line: Buffer, inline_limit: int, validate: bool, pins: dict[tuple[int, int], str]
) -> list[tuple[int, int]]:
    """`find_payload_spans`; the pins the fast path computed on the way go into `pins`."""
    if len(line) < inline_limit + 2:
        return []
    if validate:
        return _base64_values(line, inline_limit, pins)
    return _long_string_values(line, inline_limit)


def _closing_quote(line: Buffer, opening: int) -> int:
    """The quote closing the string opened at `opening` (-1: it never closes): the
    first quote after it preceded by an even run of backslashes."""
    find = line.find
    closing = find(b'"', opening + 1)
    while closing > 0 and line[closing - 1] == _BACKSLASH:
        run_start = closing - 1
        while line[run_start - 1] == _BACKSLASH and run_start - 1 > opening:
            run_start -= 1
        if (closing - run_start) % 2 == 0:
            break
        closing = find(b'"', closing + 1)
    return closing


def _long_string_values(line: Buffer, inline_limit: int) -> list[tuple[int, int]]:
    """Every string value whose raw text is at least `inline_limit` long, unchecked:
    string after string, tokenized exactly."""
    spans: list[tuple[int, int]] = []
    position = 0
    while (opening := line.find(b'"', position)) >= 0:
        closing = _closing_quote(line, opening)
        if closing < 0:
            break  # an unterminated string: the line is not JSON; nothing more to cut
        if closing - opening - 1 >= inline_limit and not _is_key(line, closing):
            start = _payload_start(bytes_reader(line), opening + 1, closing)
            if closing - start >= inline_limit:
                spans.append((start, closing))
        position = closing + 1
    return spans


def _payload_start(read: ByteReader, start: int, end: int) -> int:
    """Where the payload of the string value at [start, end) begins: after the
    prefix of a base64 data URL, else at `start`."""
    if read(start, 1)[0] not in _DATA_URL_FIRST:
        return start
    payload_start, _ = data_url_payload_start(
        lambda offset, length: read(offset, max(0, min(length, end - offset))), start
    )
    return start if payload_start < 0 else payload_start


def _quote_before_long_run(line: Buffer, position: int, inline_limit: int) -> int:
    """The first quote at or after `position` that the next `inline_limit` bytes do
    not follow with another quote, with room for a closing one after them; or -1.

    A payload holds no quote, so it opens at such a quote. The search jumps from
    a quote to the last quote within `inline_limit` bytes after it: every quote
    it jumps over has another within that distance, so none can open a payload.
    Each byte is searched once: after a jump, the bytes up to the end of the
    previous search are known to hold no quote.
    """
    size = len(line)
    quote = line.find(b'"', position)
    searched = 0  # no quote lies between `quote` and here: the previous search saw none
    while quote >= 0 and quote + 1 + inline_limit < size:
        end = quote + 1 + inline_limit
        last = line.rfind(b'"', max(quote + 1, searched), end)
        if last < 0:
            return quote
        quote, searched = last, end
    return -1


def first_payload_candidate(data: Buffer, position: int, inline_limit: int) -> int:
    """The first offset at or after `position` where a payload could open, or -1.

    Any bytes, several lines included: a payload opens at a quote that the next
    `inline_limit` bytes do not follow with another, so none can open where
    this answers -1. A necessary condition only (the line must still be
    stripped); `scrollback slim` copies the lines before it without a look.
    """
    return _quote_before_long_run(data, position, inline_limit)


def _base64_values(
    line: Buffer, inline_limit: int, pins: dict[tuple[int, int], str]
) -> list[tuple[int, int]]:
    """Every payload string value: long, base64 only once unescaped, not a key.

    Only the quotes that open a long quote-free run are candidates, so the
    short strings between payloads are never visited one by one. Whether a
    candidate opens a string is read from the parity of the quotes before it
    (all unescaped when no `\\"` is among them) or, when an escaped quote is,
    from tokenizing the strings up to it exactly.
    """
    spans: list[tuple[int, int]] = []
    position = 0  # always outside any string
    with memoryview(line) as view:
        text = stringzilla.Str(view)  # counts and scans on the line, bytes or mmap
        try:
            while (opening := _quote_before_long_run(line, position, inline_limit)) >= 0:
                if text.find('\\"', position, opening + 1) >= 0:
                    string = line.find(b'"', position)
                    closing = _closing_quote(line, string)
                    while 0 <= closing < opening:
                        string = line.find(b'"', closing + 1)
                        closing = _closing_quote(line, string)
                    if closing < 0:
                        break  # an unterminated string: the line is not JSON
                    if string != opening:
                        # The candidate closes, or is escaped in, a string that holds
                        # an escaped quote or is short: not a payload.
                        position = closing + 1
                        continue
                elif text.count('"', position, opening) % 2:
                    position = opening + 1  # it closes a string: the run after it is outside
                    continue
                # Long enough to be a payload: the fast path validates it and finds
                # its closing quote in one pass; escapes take the exact path. A data
                # URL's payload starts after its prefix (docs/contract.md §3).
                start = opening + 1
                closing, pin = _validated_run(line, view, text, start)
                if closing < 0 and line[start] in _DATA_URL_FIRST:
                    payload_start, _ = data_url_payload_start(bytes_reader(line), start)
                    if payload_start >= 0:
                        start = payload_start
                        closing, pin = _validated_run(line, view, text, start)
                if closing < 0:
                    closing = _closing_quote(line, opening)
                    if closing < 0:
                        break
                    if not is_payload(line, start, closing):
                        position = closing + 1
                        continue
                if closing - start >= inline_limit and not _is_key(line, closing):
                    spans.append((start, closing))
                    if pin:
                        pins[(start, closing)] = pin
                position = closing + 1
        finally:
            del text  # the buffer is released with it, before the view
    return spans


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
    pins: dict[tuple[int, int], str] = {}
    spans = _payload_spans(line, inline_limit, validate_payloads, pins)
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
    found = _stream_long_strings(read, size, inline_limit, chunk_size)
    spans: list[tuple[int, int]] = []
    pins: dict[tuple[int, int], str] = {}
    for string_start, end in found:
        if _stream_is_key(read, size, end):
            continue
        start = _payload_start(read, string_start, end)
        if end - start < inline_limit:
            continue
        pin = _stream_payload_pin(read, start, end, chunk_size)
        if pin is not None:
            spans.append((start, end))
            pins[(start, end)] = pin
    return _assemble(
        size,
        spans,
        lambda start, end: read(start, end - start),
        lambda start, end: pins[(start, end)],
        max_line_size,
    )


def _stream_long_strings(
    read: ByteReader, size: int, inline_limit: int, chunk_size: int
) -> list[tuple[int, int]]:
    """(start, end) of the raw text of every string at least `inline_limit` long."""
    found: list[tuple[int, int]] = []
    in_string = False
    string_start = 0
    carried_backslashes = 0  # the run of backslashes ending the previous chunk, in a string
    offset = 0
    while offset < size:
        data = read(offset, min(chunk_size, size - offset))
        position = 0
        while position < len(data):
            quote = data.find(b'"', position)
            if not in_string:
                if quote < 0:
                    break
                in_string, string_start = True, offset + quote + 1
                carried_backslashes = 0
                position = quote + 1
                continue
            if quote < 0:
                tail = _backslashes_before(data, len(data), position)
                carried_backslashes = (
                    carried_backslashes + tail if tail == len(data) - position else tail
                )
                break
            run = _backslashes_before(data, quote, position)
            if run == quote - position:
                run += carried_backslashes
            carried_backslashes = 0
            position = quote + 1
            if run % 2:
                continue  # an escaped quote
            in_string = False
            if offset + quote - string_start >= inline_limit:
                found.append((string_start, offset + quote))
        offset += len(data)
    return found


def _backslashes_before(data: bytes, end: int, floor: int) -> int:
    """How many backslashes run back from data[end - 1], not below `floor`."""
    position = end
    while position > floor and data[position - 1] == _BACKSLASH:
        position -= 1
    return end - position


def _stream_is_key(read: ByteReader, size: int, closing: int) -> bool:
    """True if a colon follows the string closing at `closing` (after whitespace)."""
    position = closing + 1
    while position < size:
        data = read(position, min(64, size - position))
        rest = data.lstrip(_JSON_WHITESPACE)
        if rest:
            return rest[0] == _COLON
        position += len(data)
    return False


def _stream_payload_pin(read: ByteReader, start: int, end: int, chunk_size: int) -> str | None:
    """The pin of line[start:end] if it is a payload (base64 once unescaped), else None."""
    digest = xxhash.xxh3_128()
    carry = b""
    position = start
    while position < end:
        data = read(position, min(chunk_size, end - position))
        position += len(data)
        digest.update(data)
        text = carry + data
        cut = len(text)
        if position < end:
            # Never split an escape (at most 6 bytes: \u00XX) between two checks.
            backslash = text.rfind(b"\\", max(0, cut - 5))
            if backslash >= 0:
                cut = backslash
        piece, carry = text[:cut], text[cut:]
        if b"\\" in piece:
            if _ESCAPED_ALPHABET_RUN.fullmatch(piece) is None:
                return None
        elif first_not_base64(piece) >= 0:
            return None
    if carry and _ESCAPED_ALPHABET_RUN.fullmatch(carry) is None:
        return None
    return digest.hexdigest()


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

    images: list[StrippedImage] = []
    failed: list[int] = []
    index = -1
    for index, (data, media_type) in enumerate(iter_images(entry)):
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
    uuid, type_, timestamp = entry.get("uuid"), entry.get("type"), entry.get("timestamp")
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
    spans = _payload_spans(line, inline_limit, True, pins)
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
    for string_start, end in _stream_long_strings(read, size, inline_limit, chunk_size):
        if _stream_is_key(read, size, end):
            continue
        start = _payload_start(read, string_start, end)
        if end - start < inline_limit:
            continue
        pin = _stream_payload_pin(read, start, end, chunk_size)
        if pin is not None:
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
