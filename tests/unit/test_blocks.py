"""Objects' byte spans and top-level members found textually (scrollback/contract/blocks.py)."""

from __future__ import annotations

import json

from scrollback.contract.blocks import (
    iter_objects,
    matching_spans,
    object_spans,
    top_level_string_span,
)


def test_object_spans_follow_the_pre_order_walk() -> None:
    text = b'{"a": {"b": [{"c": "}{"}, {}]}, "d": [[{"e": "\\"{"}]]}'
    entry = json.loads(text)
    spans = object_spans(text)
    objects = list(iter_objects(entry))
    assert len(spans) == len(objects) == 5
    for (start, end), obj in zip(spans, objects, strict=True):
        assert json.loads(text[start:end]) == obj
    assert matching_spans(text, entry, objects[2:3]) == [spans[2]]


def test_duplicate_keys_give_no_span_rather_than_a_wrong_one() -> None:
    text = b'{"a": {"x": 1}, "a": {"y": 2}, "b": {"z": 3}}'
    entry = json.loads(text)
    assert matching_spans(text, entry, list(iter_objects(entry))) == [None, None, None]


def test_top_level_string_span() -> None:
    text = b'{"message": {"sessionId": "inner"}, "sessionId" : "outer", "n": "sessionId"}'
    start, end = top_level_string_span(text, "sessionId") or (0, 0)
    assert text[start:end] == b"outer"
    assert top_level_string_span(b'{"sessionId": 5, "x": "y"}', "sessionId") is None
    assert top_level_string_span(b'{"sessionId": null}', "sessionId") is None
    assert top_level_string_span(b'{"other": "sessionId"}', "sessionId") is None
    later = b'{"sessionId": "a", "sessionId": "b"}'
    start, end = top_level_string_span(later, "sessionId") or (0, 0)
    assert later[start:end] == b"b"  # the last member wins, as a parser keeps it
