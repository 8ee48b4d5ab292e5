"""Fuzzing the stripper and the ref codec with hypothesis.

Short by default; `SCROLLBACK_FUZZ_EXAMPLES=<n>` runs n examples per target
(e.g. 200000 for a long run). strip_line must never raise for any bytes; the
ref parsers only ever raise RefError, and what they accept round-trips.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrollback.contract.refs import RefError, parse_ref
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line

EXAMPLES = int(os.environ.get("SCROLLBACK_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_payload = st.binary(min_size=0, max_size=3000).map(lambda b: base64.b64encode(b).decode())
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | _payload,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["type", "data", "content", "source", "uuid", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def _mutate(data: bytes, cuts: list[tuple[int, int, bytes]]) -> bytes:
    buffer = bytearray(data)
    for position, length, insert in cuts:
        if not buffer:
            buffer.extend(insert)
            continue
        at = position % len(buffer)
        buffer[at : at + length] = insert
    return bytes(buffer)


@FUZZ
@given(st.binary(max_size=4096), st.integers(min_value=MIN_INLINE_LIMIT, max_value=64 * 1024))
def test_strip_line_never_raises_on_arbitrary_bytes(line: bytes, limit: int) -> None:
    strip_line(line, inline_limit=limit)


@FUZZ
@given(
    _json_values,
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 8), st.binary(max_size=8)), max_size=6
    ),
)
def test_strip_line_never_raises_on_mutated_json(
    value: object, cuts: list[tuple[int, int, bytes]]
) -> None:
    entry = {"type": "user", "uuid": "u1", "message": {"content": [value]}}
    line = json.dumps(entry).encode()
    for candidate in (line, _mutate(line, cuts)):
        stripped = strip_line(candidate, inline_limit=MIN_INLINE_LIMIT)
        if stripped is not None:
            assert isinstance(stripped.json, bytes)


@FUZZ
@given(st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_ref_parser_only_raises_ref_error_and_round_trips(text: str) -> None:
    try:
        ref = parse_ref(text)
    except RefError:
        return
    assert str(ref) == text
    assert parse_ref(str(ref)) == ref


@FUZZ
@given(
    st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    st.integers(0, 9999),
    st.sampled_from(["", "/", "0", "\x00", "..", " ", "-1", "/x"]),
)
def test_ref_parser_refuses_near_misses(session: str, uuid: str, index: int, noise: str) -> None:
    text = f"{session}/{uuid}/{index}"
    assert str(parse_ref(text)) == text
    if noise:
        for candidate in (text + noise, noise + text):
            with contextlib.suppress(RefError):
                assert str(parse_ref(candidate)) == candidate
