"""The image list's numbering in bounded memory answers exactly what the rule over every entry does.

`reference_list_images` is the image list as it was written before the
numbering held only the chain: every entry's facts in a list, `api_positions`
over them. Generated transcripts (uuids drawn from a small pool so they repeat,
parents written before or after their children, cycles, entries that are no
message, blank and non-JSON lines, image lines, long lines, a tail without a
newline) must get the same records from `list_images`, at several block sizes
so lines cross the blocks of both passes, and several look-aheads of the walk so
its guesses are both right and wrong.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from history_service import image_list, numbering, slim_scan
from history_service.errors import ChainTooLargeError
from history_service.image_list import ImageRecord, list_images, problems_of
from history_service.numbering import api_positions, entry_facts
from history_service.slim_blocks import (
    LineSource,
    block_facts,
    block_ref,
    declared_type,
    media_blocks,
)
from history_service.slim_scan import segments
from scrollback.contract.refs import entry_name
from scrollback.contract.stripping import parse_json_object
from scrollback.linefile import ByteSource, LocalSource

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da63f8cfc0f01f0005000201ad5ee8f80000000049454e44ae426082"
)


def reference_list_images(
    fd: ByteSource, size: int, session_id: str, max_line: int
) -> list[ImageRecord]:
    """The image list with every entry's facts held (the rule, as first written)."""
    records: list[tuple[int, ImageRecord]] = []
    entries = []
    line_number = 0
    for segment in segments(fd, size, max_line):
        if isinstance(segment, tuple):
            for text in segment[2].split(b"\n")[:-1]:
                line_number += 1
                entry = parse_json_object(text) if text.strip() else None
                if entry is not None:
                    entries.append(entry_facts(entry))
            continue
        raw = segment
        line_number += 1
        source = LineSource(raw)
        probed = source.probe()
        if probed is None:
            continue
        position = len(entries)
        entries.append(entry_facts(probed.entry))
        uuid = entries[-1].uuid
        for block in media_blocks(probed):
            if not block.content_path:
                continue
            block_facts(source, probed, block)
            ref, pin = block_ref(raw.start, session_id, probed.entry, block, probed)
            assert block.facts is not None
            records.append(
                (
                    position,
                    ImageRecord(
                        session_id,
                        uuid,
                        entry_name(uuid, raw.start),
                        line_number,
                        raw.start,
                        block.kind,
                        block.image_index,
                        block.content_path,
                        declared_type(block.block),
                        block.facts,
                        ref,
                        pin,
                    ),
                )
            )
    positions = api_positions(entries)
    image_count = sum(1 for _, record in records if record.kind == "image")
    for position, record in records:
        at = positions.get(position)
        if at is not None:
            number, offset = at
            first, *rest = record.content_path
            path = f"messages.{number}.content.{offset + first}"
            record.api_path = path + "".join(f".content.{k}" for k in rest)
        record.problems = problems_of(record, image_count)
    return [record for _, record in records]


UUIDS = ["u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7"]


def _image(padding: int) -> dict[str, Any]:
    data = base64.b64encode(PNG + b"\0" * padding).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """One line of a transcript (without its newline)."""
    shape = draw(st.sampled_from(["entry"] * 8 + ["blank", "junk", "array"]))
    if shape == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t"]))
    if shape == "junk":
        return b'{"uuid":"u1", not json'
    if shape == "array":
        return b'["u1"]'
    entry: dict[str, Any] = {"type": draw(st.sampled_from(["user", "assistant", "system", "x"]))}
    entry["uuid"] = draw(st.sampled_from([*UUIDS, "", 7]))
    parent = draw(st.sampled_from([*UUIDS, None, "", "gone", 3, "absent"]))
    if parent != "absent":
        entry["parentUuid"] = parent
    if draw(st.integers(0, 5)) == 0:
        entry["isApiErrorMessage"] = True
    content: Any
    kind = draw(st.sampled_from(["text", "list", "images", "nested", "none"]))
    if kind == "text":
        content = "hello"
    elif kind == "list":
        content = [{"type": "text", "text": "x"}] * draw(st.integers(0, 3))
    elif kind == "images":
        content = [{"type": "text", "text": "x"}, _image(draw(st.sampled_from([0, 900, 3000])))]
    elif kind == "nested":
        content = [{"type": "tool_result", "content": [_image(0), {"type": "text", "text": "y"}]}]
    else:
        content = None
    if content is not None:
        entry["message"] = {"role": entry["type"], "content": content}
    if draw(st.integers(0, 6)) == 0:
        entry["pad"] = "z" * draw(st.sampled_from([100, 2500]))  # a long line
    text = json.dumps(entry, separators=(",", ":"))
    if draw(st.integers(0, 10)) == 0:
        text = text.replace('"u', '"\\u0075')  # the same uuids, escaped
    return text.encode()


@st.composite
def transcripts(draw: st.DrawFn) -> bytes:
    """A transcript: lines, a newline after each but perhaps the last."""
    body = b"\n".join(draw(st.lists(lines(), max_size=40)))
    return body + (b"\n" if draw(st.booleans()) else b"")


@given(
    data=transcripts(),
    block=st.sampled_from([64, 700, slim_scan.SCAN_BLOCK]),
    lookahead=st.sampled_from([1, 2, numbering.LOOKAHEAD_LINES]),
)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_the_bounded_numbering_answers_as_the_rule(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, block: int, lookahead: int
) -> None:
    path = tmp_path_factory.mktemp("numbering") / "t.jsonl"
    path.write_bytes(data)
    with (
        mock.patch.object(slim_scan, "SCAN_BLOCK", block),
        mock.patch.object(numbering, "LOOKAHEAD_LINES", lookahead),
    ):
        for max_line in (2000, 1 << 20):
            assert _listed(path, list_images, max_line) == _listed(
                path, reference_list_images, max_line
            )


def _listed(path: Path, lister: Any, max_line: int) -> list[ImageRecord]:
    with LocalSource(os.open(path, os.O_RDONLY)) as fd:
        records: list[ImageRecord] = lister(fd, path.stat().st_size, "sess", max_line)
        return records


def _write(path: Path, entries: list[dict[str, Any]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in entries) + tail)


def _user(uuid: str, parent: str | None, *content: dict[str, Any]) -> dict[str, Any]:
    body = [{"type": "text", "text": "x"}, *content]
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "message": {"content": body}}


def _assistant(uuid: str, parent: str | None) -> dict[str, Any]:
    content = [{"type": "text", "text": "ok"}]
    return {
        "type": "assistant",
        "uuid": uuid,
        "parentUuid": parent,
        "message": {"content": content},
    }


def test_a_linear_chain_is_numbered_without_the_rules_pass(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(
        path,
        [
            _user("a", None, _image(0)),
            _assistant("b", "a"),
            _user("c", "b"),
            _user("d", "c", _image(0)),
            _assistant("e", "d"),
        ],
    )
    with mock.patch.object(image_list, "positions_by_offset", side_effect=AssertionError):
        listed = _listed(path, list_images, 1 << 20)
    assert [record.api_path for record in listed] == [
        "messages.0.content.1",
        "messages.2.content.2",
    ]
    assert listed == _listed(path, reference_list_images, 1 << 20)


def _filler(count: int) -> list[dict[str, Any]]:
    """Entries off the chain: they push a parent out of the walk's look-ahead."""
    return [{"type": "progress", "uuid": f"f{k}", "parentUuid": None} for k in range(count)]


def _counting_fallback() -> tuple[list[Any], Any]:
    calls: list[Any] = []
    real = numbering.positions_by_offset

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    return calls, mock.patch.object(image_list, "positions_by_offset", counted)


def test_parents_written_just_after_their_children_are_numbered_in_chain_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    _write(
        path,
        [
            _user("a", None, _image(0)),
            {"type": "attachment", "uuid": "c", "parentUuid": "b"},  # written before its parent
            {"type": "attachment", "uuid": "b", "parentUuid": "a"},
            _assistant("d", "c"),
            _user("e", "g", _image(0)),  # its parent two lines on
            _assistant("f", "d"),
            _assistant("g", "f"),
            _assistant("h", "e"),
        ],
    )
    calls, patch = _counting_fallback()
    with patch:
        listed = _listed(path, list_images, 1 << 20)
    assert not calls, "a parent a line or two after its child needs no pass over every entry"
    assert [record.api_path for record in listed] == [
        "messages.0.content.1",
        "messages.2.content.1",
    ]
    assert listed == _listed(path, reference_list_images, 1 << 20)


FAR = 2 * numbering.LOOKAHEAD_LINES + 2


@pytest.mark.parametrize(
    "entries",
    [
        # a parent written long after its child
        [_user("b", "a", _image(0)), *_filler(FAR), _assistant("a", None), _user("c", "b")],
        # a chain entry's uuid written again long after, off the chain
        [
            _user("a", None, _image(0)),
            _assistant("b", "a"),
            _user("c", "b", _image(0)),
            *_filler(FAR),
            {"type": "system", "uuid": "a"},
        ],
        # the root's parent written long after, pointing back into the chain (a cycle)
        [
            _user("a", "x", _image(0)),
            _assistant("b", "a"),
            *_filler(FAR),
            _user("c", "b"),
            {"type": "system", "uuid": "x", "parentUuid": "b"},
        ],
    ],
    ids=["parent-far-after-child", "uuid-repeated", "root-parent-after"],
)
def test_a_chain_the_walk_cannot_follow_gets_the_rules_answer(
    tmp_path: Path, entries: list[dict[str, Any]]
) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, entries)
    calls, patch = _counting_fallback()
    with patch:
        listed = _listed(path, list_images, 1 << 20)
    assert calls, "the check let a chain through that the rule does not take"
    assert listed == _listed(path, reference_list_images, 1 << 20)


def test_a_chain_over_the_budget_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    entries = [_user("u0", None, _image(0))]
    entries += [_assistant(f"u{k}", f"u{k - 1}") for k in range(1, 200)]
    _write(path, entries)
    with LocalSource(os.open(path, os.O_RDONLY)) as fd:
        size = path.stat().st_size
        assert list_images(fd, size, "s", 1 << 20, budget=200 * numbering.CHAIN_ENTRY_BYTES)
        with pytest.raises(ChainTooLargeError):
            list_images(fd, size, "s", 1 << 20, budget=199 * numbering.CHAIN_ENTRY_BYTES)


def test_a_long_unterminated_last_entry_heading_the_chain_gets_the_rules_answer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    last = _user("c", "b") | {"pad": "z" * 5000}
    _write(path, [_user("a", None, _image(0)), _assistant("b", "a")], json.dumps(last).encode())
    listed = _listed(path, list_images, 2000)
    assert [record.api_path for record in listed] == ["messages.0.content.1"]
    assert listed == _listed(path, reference_list_images, 2000)


def test_the_rules_pass_over_the_budget_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    entries = [_user("u0", None, _image(0))]
    entries += [_assistant(f"u{k}", f"u{k - 1}") for k in range(1, 100)]
    entries.append({"type": "system", "uuid": "u5"})  # a chain uuid again: the check fails
    _write(path, entries)
    with LocalSource(os.open(path, os.O_RDONLY)) as fd:
        size = path.stat().st_size
        assert list_images(fd, size, "s", 1 << 20, budget=101 * numbering.ENTRY_BYTES * 2)
        with pytest.raises(ChainTooLargeError):
            list_images(fd, size, "s", 1 << 20, budget=100 * numbering.CHAIN_ENTRY_BYTES * 2)


CORPUS = Path(__file__).resolve().parent.parent / "corpus"
CORPUS_FILES = sorted(CORPUS.rglob("*.jsonl"))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.name[-40:] for p in CORPUS_FILES])
def test_real_transcripts_get_the_rules_answer(path: Path) -> None:
    """The corpus (tests/corpus) as written by Claude Code and others, parents after children included."""
    assert _listed(path, list_images, 1 << 20) == _listed(path, reference_list_images, 1 << 20)


def test_a_real_parent_written_after_its_child_needs_no_pass_over_every_entry() -> None:
    swapped = [
        p for p in CORPUS_FILES if p.name.endswith("ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl")
    ]
    assert len(swapped) == 1
    calls, patch = _counting_fallback()
    with patch:
        listed = _listed(swapped[0], list_images, 1 << 20)
    assert not calls
    assert listed == _listed(swapped[0], reference_list_images, 1 << 20)
