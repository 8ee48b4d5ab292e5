"""Property and case tests of the textual top-level member finder (scrollback.contract.top_level).

The reference is the parsed object: over the whole text, the forward scan
yields exactly the top-level string members in order and the backward scan
the same members last first; over bounded windows, whatever is found agrees
with the parse and nothing nested or quoted in text is ever taken.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scrollback.contract.top_level import (
    backward_members,
    forward_members,
    looks_like_object,
    top_level_strings,
)

KEYS = ["uuid", "type", "timestamp", "parentUuid", "message", "x", 'q"k', "\\"]
TEXT = st.lists(
    st.sampled_from([*'abc"\\/{}[]:, \n\té😀', "\ud800", "uuid", '"uuid":"']), max_size=12
).map("".join)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    ),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6)


def dump(value: Any, spaced: bool) -> bytes:
    """JSON text, compact or spaced, non-ASCII escaped or not (both appear in transcripts)."""
    if spaced:
        return json.dumps(value, indent=1, ensure_ascii=True).encode()
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        return compact.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JavaScript writes it as an escape
        return json.dumps(value, separators=(",", ":")).encode()


def expected_members(entry: dict[str, Any]) -> list[tuple[str, str]]:
    return [(key, value) for key, value in entry.items() if isinstance(value, str)]


@settings(max_examples=400, deadline=None)
@given(OBJECTS, st.booleans())
def test_whole_text_scans_equal_the_parse(entry: dict[str, Any], spaced: bool) -> None:
    text = dump(entry, spaced)
    members = expected_members(entry)
    assert list(forward_members(text)) == members
    assert list(backward_members(text)) == members[::-1]
    assert looks_like_object(text, text)


@settings(max_examples=400, deadline=None)
@given(OBJECTS, st.booleans(), st.integers(min_value=1, max_value=400))
def test_windows_find_only_what_the_parse_has(
    entry: dict[str, Any], spaced: bool, window: int
) -> None:
    text = dump(entry, spaced)
    found = top_level_strings(
        lambda offset, length: text[offset : offset + length],
        len(text),
        frozenset(KEYS),
        window,
    )
    for key, value in found.items():
        assert entry.get(key) == value
    if len(text) <= window:
        assert found == dict(expected_members(entry))


def test_claude_code_order_with_a_huge_message_in_between() -> None:
    filler = "A" * 300_000
    entry = {
        "parentUuid": "p-1",
        "type": "user",
        "message": {"uuid": "nested", "content": [{"type": "text", "text": '"uuid":"fake"'}]},
        "toolUseResult": {"file": {"base64": filler, "type": "image"}},
        "uuid": "u-real",
        "timestamp": "2025-01-01T00:00:00Z",
    }
    text = dump(entry, False)
    reads: list[tuple[int, int]] = []

    def read(offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return text[offset : offset + length]

    found = top_level_strings(read, len(text), frozenset({"uuid", "type", "timestamp"}), 4096)
    assert found == {"type": "user", "uuid": "u-real", "timestamp": "2025-01-01T00:00:00Z"}
    assert sum(length for _, length in reads) <= 2 * 4096


def test_not_objects() -> None:
    assert not looks_like_object(b"[1,2,3]", b"[1,2,3]")
    assert not looks_like_object(b"plain prose about {things}", b"plain prose about {things}")
    assert not looks_like_object(b'  {"a": 1', b"1, 2")
    assert looks_like_object(b' {"a"', b'"z"} \r')
    assert list(forward_members(b'["uuid","x"]')) == []
    assert list(backward_members(b'["uuid","x"]')) == []
    # a window cut inside a string finds nothing past the cut
    assert list(forward_members(b'{"type":"us')) == []
    assert list(backward_members(b'er","uuid":"u1"}')) == [("uuid", "u1")]
