"""Finding the payloads of a transcript line (docs/contract.md §3), on its raw bytes.

A payload is a string value whose raw text is at least the inline limit long
and holds base64 characters only once its escapes are read; a data URL's
payload starts after its prefix. `payload_spans` finds them in a held line
(only the quotes that open a long quote-free run are candidates, each
validated and hashed for its pin in one pass, `_validated_run`),
`streamed_payloads` in a line read in bounded chunks. The stripper
(scrollback.contract.stripping) cuts what these find.
"""

from __future__ import annotations

import mmap
import re

import stringzilla
import xxhash

from scrollback.contract.data_url import bytes_reader, data_url_payload_start
from scrollback.contract.reading import ByteReader

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
    return payload_spans(line, inline_limit, validate, {})


def payload_spans(
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


def streamed_payloads(
    read: ByteReader, size: int, inline_limit: int, chunk_size: int
) -> list[tuple[int, int, str]]:
    """(start, end, pin) of every payload of a line of `size` bytes read in chunks: the
    long string values found in one pass, each then checked and pinned in bounded reads."""
    found: list[tuple[int, int, str]] = []
    for string_start, end in _stream_long_strings(read, size, inline_limit, chunk_size):
        if _stream_is_key(read, size, end):
            continue
        start = _payload_start(read, string_start, end)
        if end - start < inline_limit:
            continue
        pin = _stream_payload_pin(read, start, end, chunk_size)
        if pin is not None:
            found.append((start, end, pin))
    return found


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
