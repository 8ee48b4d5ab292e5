"""Where a parsed line's objects are in its text: byte spans by document order.

The stripper parses only a line's small remainder (its probe, payloads cut,
docs/contract.md §3), which gives values but no offsets. To replace a whole
content block textually (`scrollback slim`), its byte range is needed. A JSON
text's objects, numbered by the position of their opening brace, come in the
same order as a pre-order walk of the parsed value (object members and array
items in document order), so the k-th object of `iter_objects` is the k-th span
of `object_spans`. `matching_spans` pairs them and checks each pair it is asked
about by parsing the span back, so a text the pairing cannot follow (duplicate
keys, which a parser collapses) yields no span rather than a wrong one.

The tokenizer only knows strings (skipped whole by one regex match, escapes
included) and braces; it runs over the probe, never over a payload.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from scrollback.contract.stripping import parse_json_object

# A JSON string (escapes included), with the colon after it when it is a key; or a bracket.
_TOKEN = re.compile(rb'("[^"\\]*(?:\\.[^"\\]*)*")([ \t\r\n]*:)?|[{}\[\]]')
_OPEN_OBJECT = ord("{")
_CLOSE_OBJECT = ord("}")
_OPEN_ARRAY = ord("[")
_CLOSE_ARRAY = ord("]")


def object_spans(text: bytes) -> list[tuple[int, int]]:
    """[start, end) of every object of a JSON text, ordered by its opening brace."""
    spans: list[tuple[int, int]] = []
    open_at: list[int] = []  # indexes into `spans` of the objects still open
    for match in _TOKEN.finditer(text):
        if match.group(1) is not None:
            continue
        byte = text[match.start()]
        if byte == _OPEN_OBJECT:
            open_at.append(len(spans))
            spans.append((match.start(), -1))
        elif byte == _CLOSE_OBJECT and open_at:
            k = open_at.pop()
            spans[k] = (spans[k][0], match.end())
    return spans


def iter_objects(value: Any) -> Iterator[dict[str, Any]]:
    """Every object of a parsed value in pre-order, document order (an explicit stack)."""
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                yield item
                stack.append(iter(item.values()))
                break
            if isinstance(item, list):
                stack.append(iter(item))
                break
        else:
            stack.pop()


def matching_spans(
    text: bytes, entry: dict[str, Any], wanted: list[dict[str, Any]]
) -> list[tuple[int, int] | None]:
    """The span in `text` of each object of `wanted` (objects of `entry`, parsed from `text`).

    None for an object whose span cannot be told for sure: the pairing by order
    failed, or the span does not parse back to an equal object.
    """
    spans = object_spans(text)
    objects = list(iter_objects(entry))
    if len(spans) != len(objects):
        return [None] * len(wanted)
    order = {id(obj): k for k, obj in enumerate(objects)}
    found: list[tuple[int, int] | None] = []
    for obj in wanted:
        k = order.get(id(obj), -1)
        span = spans[k] if k >= 0 else None
        if span is None or span[1] < 0 or parse_json_object(text[span[0] : span[1]]) != obj:
            found.append(None)
        else:
            found.append(span)
    return found


def top_level_string_span(text: bytes, key: str) -> tuple[int, int] | None:
    """[start, end) of the raw text (between the quotes) of the top-level string member `key`.

    The last such member wins, as a parser takes it; None when there is none
    or its value is not a string.
    """
    wanted = b'"' + key.encode("utf-8") + b'"'
    depth = 0
    found: tuple[int, int] | None = None
    expect_value = False
    key_end = 0
    for match in _TOKEN.finditer(text):
        string = match.group(1)
        if expect_value and text[key_end : match.start()].strip(b" \t\r\n"):
            expect_value = False  # a number, literal or other value came first: not a string
        if string is not None:
            if expect_value:
                found = (match.start(1) + 1, match.end(1) - 1)
                expect_value = False
            elif depth == 1 and match.group(2) is not None and string == wanted:
                expect_value = True
                key_end = match.end()
                found = None
            continue
        if expect_value:
            expect_value = False  # the value is not a string
        byte = text[match.start()]
        if byte in (_OPEN_OBJECT, _OPEN_ARRAY):
            depth += 1
        elif byte in (_CLOSE_OBJECT, _CLOSE_ARRAY):
            depth -= 1
    return found
