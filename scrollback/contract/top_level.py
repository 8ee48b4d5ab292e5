"""Top-level string members of a JSON object line found textually, in bounded windows.

An oversize line (docs/contract.md §3) is never parsed whole, yet its stub keeps
the line's top-level `uuid`, `type` and `timestamp`. They are found here by a
small tokenizer that tracks strings and nesting depth, run forwards over a
bounded prefix of the line and backwards over a bounded suffix (Claude Code
writes `type` before `message` and `uuid`, `timestamp` after it, so a huge
`message` sits between them). Only members at depth 1 count: the same keys
inside `message` or `toolUseResult`, or mentioned in text, never match.
A window cut inside a string stops its scan there; nothing past the windows
is ever read. Long strings (payloads) are skipped with `bytes.find`.

`looks_like_object` is the cheap framing test used to skip an oversize line
that is not a JSON object: its first non-blank byte is `{` and its last `}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import orjson

from scrollback.contract.reading import ByteReader

# How much of each end of an oversize line is scanned.
TOP_LEVEL_WINDOW = 64 * 1024
# Values longer than this (raw, quotes included) are not ids, types or timestamps.
_MAX_VALUE = 512
_BLANK = b" \t\r\n"
_STRUCTURAL = re.compile(rb'["{}\[\]:,]')
_STRUCTURAL_BYTES = frozenset(b'"{}[]:,')


_NOT_STRING = object()


def _decode(raw: bytes) -> str | None:
    """A JSON string token (quotes included) as text; None if it is not one."""
    if len(raw) > _MAX_VALUE:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            value = json.loads(raw.decode("utf-8"))  # lone surrogate escapes
        except ValueError:
            return None
    return value if isinstance(value, str) else None


def _escaped(data: bytes, quote: int, floor: int, *, floor_known: bool) -> bool | None:
    """True if the quote at `quote` is escaped.

    Backslashes are counted back to `floor`; reaching it is fine when what is
    before `floor` is known not to be a backslash (`floor_known`), and gives
    None (cannot tell) otherwise.
    """
    i = quote - 1
    while i >= floor and data[i] == 0x5C:
        i -= 1
    if i < floor and not floor_known:
        return None
    return (quote - 1 - i) % 2 == 1


def forward_members(data: bytes) -> Iterator[tuple[str, str]]:
    """(key, value) of each top-level string member in a prefix of an object's text."""
    start = len(data) - len(data.lstrip(_BLANK))
    if start >= len(data) or data[start] != 0x7B:
        return
    depth = 1
    key: str | None = None
    after_colon = False
    last_string: str | None = None
    i = start + 1
    while True:
        found = _STRUCTURAL.search(data, i)
        if found is None:
            return
        at = found.start()
        if depth == 1 and after_colon and data[i:at].strip(_BLANK):
            after_colon = False  # a number, true, false or null
            key = None
        byte = data[at]
        if byte == 0x22:
            end = at
            while True:
                end = data.find(b'"', end + 1)
                if end < 0:
                    return  # the prefix ends inside a string
                if not _escaped(data, end, at + 1, floor_known=True):
                    break
            if depth == 1:
                if after_colon:
                    if key is not None and end - at + 1 <= _MAX_VALUE:
                        value = _decode(data[at : end + 1])
                        if value is not None:
                            yield key, value
                    after_colon = False
                    key = None
                else:
                    last_string = _decode(data[at : end + 1])
            i = end + 1
            continue
        if byte in b"{[":
            if depth == 1:
                after_colon = False
                key = None
            depth += 1
        elif byte in b"}]":
            depth -= 1
            if depth == 0:
                return
        elif depth == 1 and byte == 0x3A:
            after_colon = True
            key = last_string
            last_string = None
        elif depth == 1:  # a comma
            after_colon = False
            key = None
            last_string = None
        i = at + 1


def backward_members(data: bytes) -> Iterator[tuple[str, str]]:
    """(key, value) of each top-level string member in a suffix of an object's text.

    Members come last first. The scan starts outside any string (after the
    object's closing brace), so each quote met going back closes a string
    whose opening quote is the previous unescaped one.
    """
    end = len(data.rstrip(_BLANK))
    if end == 0 or data[end - 1] != 0x7D:
        return
    depth = 1
    value: object = None  # the last member value met at depth 1
    colon = False
    i = end - 1  # data[i:] is consumed
    while True:
        at = i - 1
        while at >= 0 and data[at] not in _STRUCTURAL_BYTES:
            at -= 1
        if at < 0:
            return
        if depth == 1 and data[at + 1 : i].strip(_BLANK):
            value = _NOT_STRING  # a number, true, false or null
        byte = data[at]
        if byte == 0x22:
            opening = at
            while True:
                opening = data.rfind(b'"', 0, opening)
                if opening < 0:
                    return  # the suffix starts inside a string
                escaped = _escaped(data, opening, 0, floor_known=False)
                if escaped is None:
                    return
                if not escaped:
                    break
            if depth == 1:
                token = data[opening : at + 1]
                if colon:
                    key = _decode(token)
                    if key is not None and isinstance(value, str):
                        yield key, value
                    colon = False
                    value = None
                else:
                    value = _decode(token) if len(token) <= _MAX_VALUE else _NOT_STRING
                    if value is None:
                        value = _NOT_STRING
            i = opening
            continue
        if byte in b"}]":
            if depth == 1:
                value = _NOT_STRING
            depth += 1
        elif byte in b"{[":
            depth -= 1
            if depth == 0:
                return
        elif depth == 1 and byte == 0x3A:
            colon = True
        elif depth == 1:  # a comma
            colon = False
            value = None
        i = at


def looks_like_object(head: bytes, tail: bytes) -> bool:
    """True if a line's first non-blank byte is `{` and its last non-blank byte `}`."""
    first = head.lstrip(_BLANK)[:1]
    last = tail.rstrip(_BLANK)[-1:]
    return first == b"{" and last == b"}"


def top_level_strings(
    read: ByteReader, size: int, keys: frozenset[str], window: int = TOP_LEVEL_WINDOW
) -> dict[str, str]:
    """The top-level string members named in `keys`, read from both ends of a line.

    At most `window` bytes from each end are read. Where a key occurs more
    than once, the later occurrence wins, as in a JSON parser.
    """
    found: dict[str, str] = {}
    head = read(0, min(size, window))
    for key, value in forward_members(head):
        if key in keys:
            found[key] = value
    if size <= window:
        return found
    tail_start = max(window, size - window)
    tail = read(tail_start, size - tail_start)
    later: dict[str, str] = {}
    for key, value in backward_members(tail):
        if key in keys and key not in later:
            later[key] = value
    found.update(later)
    return found
