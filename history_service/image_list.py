"""The image list (`scrollback images`, ListImages): every image and document block of
`message.content`, with its place in the API's message list (docs/contract.md §14 states the
rule), its size, its pixel size from the header, its ref, and what the API would refuse.

The numbering holds only the chain's offsets: a backward pass walks the chain
(`ChainWalk`, over `linesplit.split_lines_backward`) and the image pass checks
and numbers it (`ChainCheck`); history_service/numbering.py has the rule. A line
too large to parse even once its payloads are cut counts as the stub the window
serves for it (`oversize_entry`): its top-level `uuid`, `parentUuid` and `type`
read textually, a message of one block when its type is user or assistant.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from history_service import slim_scan
from history_service.lines import FileShrankError
from history_service.numbering import (
    NUMBERING_BUDGET,
    BackLine,
    ChainCheck,
    ChainWalk,
    EntryFacts,
    entry_facts,
    positions_by_offset,
)
from history_service.slim_blocks import (
    LineSource,
    PayloadFacts,
    block_facts,
    block_ref,
    declared_type,
    media_blocks,
)
from history_service.slim_downscale import (
    API_HARD_MAX_SIDE,
    API_MANY_IMAGES,
    API_MAX_BYTES,
    API_MAX_SIDE,
)
from history_service.slim_scan import segments
from scrollback.contract.refs import entry_name
from scrollback.contract.stripping import ProbedLine, parse_json_object
from scrollback.contract.top_level import TOP_LEVEL_WINDOW, looks_like_object, top_level_strings
from scrollback.linefile import ByteSource, LineFile
from scrollback.linesplit import complete_end, split_lines_backward
from scrollback.linewalk import RawLine, split_lines

# Problems of an image, as `scrollback images` names them.
OVER_HARD_SIDE = "over_8000_px"
OVER_SIDE_MANY = "over_2000_px_with_many_images"
OVER_BYTES = "over_5_mb"
UNDECODABLE = "undecodable"
# The members of an oversize line its stub keeps for the numbering.
_STUB_KEYS = frozenset({"uuid", "parentUuid", "type"})


def oversize_entry(fd: ByteSource, start: int, end: int) -> dict[str, Any] | None:
    """The entry the numbering counts for a line too large to parse even stripped.

    As the window's stub of it (docs/contract.md §3): its top-level `uuid`,
    `parentUuid` and `type` found textually in bounded windows of its two
    ends, and an empty message (one block); None when it is not framed as a
    JSON object, skipped like any non-object line.
    """

    def read(offset: int, length: int) -> bytes:
        return LineFile(fd).read(length, start + offset)

    size = end - start
    window = min(size, TOP_LEVEL_WINDOW)
    if not looks_like_object(read(0, window), read(size - window, window)):
        return None
    return {**top_level_strings(read, size, _STUB_KEYS), "message": {}}


@dataclass(slots=True)
class ImageRecord:
    """One image or document block of `message.content`, as `scrollback images` lists it."""

    session_id: str
    entry_uuid: str  # its line's uuid as written ("" for none)
    entry_name: str  # how refs name its entry (`entry_name`): the uuid, or at-<offset>
    line_number: int
    byte_offset: int
    kind: str
    image_index: int
    content_path: tuple[int, ...]
    declared_media_type: str
    facts: PayloadFacts
    ref: str
    pin: str
    api_path: str = ""
    problems: list[str] = field(default_factory=list)


def _entries(
    fd: ByteSource, size: int, max_line: int
) -> Iterator[tuple[int, int, EntryFacts, LineSource | None, ProbedLine | None]]:
    """(line number, byte offset, facts, line, probe) of each entry in file order.

    Lines with no image, document or payload (`segments`) are parsed only for
    what the API numbering needs (no line or probe given); the others are probed,
    and one still too large once its payloads are cut counts as its stub
    (`oversize_entry`).
    """
    line_number = 0
    for segment in segments(fd, size, max_line):
        if isinstance(segment, tuple):
            # Lines with no image, document or payload: only what the numbering needs.
            offset = segment[0]
            for text in split_lines(segment[2]):
                line_number += 1
                entry = parse_json_object(text) if text.strip() else None
                if entry is not None:
                    yield line_number, offset, entry_facts(entry), None, None
                offset += len(text) + 1
            continue
        line_number += 1
        source = LineSource(segment)
        probed = source.probe_sized()
        if isinstance(probed, ProbedLine):
            yield line_number, segment.start, entry_facts(probed.entry), source, probed
        elif probed is not None and segment.terminated:
            stub = oversize_entry(fd, segment.start, segment.end)
            if stub is not None:
                yield line_number, segment.start, entry_facts(stub), None, None


# The members the chain walk reads of a line too long to hold.
_CHAIN_KEYS = frozenset({"uuid", "parentUuid"})


def _back_entry(line: BackLine, fd: ByteSource, whole: bool) -> dict[str, Any] | None:
    """The entry of one line of the backward pass.

    A line too long to hold is probed when `whole` is asked for (and counts as its
    stub when still too large, `oversize_entry`), else only its top-level `uuid`
    and `parentUuid` are read from its two ends (bounded windows).
    """
    start, end, data = line
    if data is not None:
        return None if not data or data.isspace() else parse_json_object(data)
    if not whole:
        return top_level_strings(
            lambda offset, length: LineFile(fd).read(length, start + offset),
            end - start,
            _CHAIN_KEYS,
        )
    probed = LineSource(RawLine(start, end, None, False, fd)).probe_sized()
    if isinstance(probed, ProbedLine):
        return probed.entry
    return None if probed is None else oversize_entry(fd, start, end)


def _walk_chain(fd: ByteSource, size: int, max_line: int, budget: int) -> ChainWalk:
    """The candidate chain, from the file's end back to its root (numbering.py, pass 1)."""
    walk = ChainWalk(budget)
    complete = complete_end(fd, size, slim_scan.SCAN_BLOCK)
    lines: Iterator[BackLine] = split_lines_backward(
        fd, complete, max_line, slim_scan.SCAN_BLOCK, FileShrankError
    )
    if 0 < size - complete <= max_line:
        # A newline-less tail over the max line size is not read again here: one being
        # written is no entry, and a finished one that heads the chain fails the check.
        data = LineFile(fd).read(size - complete, complete)
        lines = itertools.chain(((complete, size, data),), lines)
    walk.walk(lines, lambda line, whole: _back_entry(line, fd, whole))
    return walk


def list_images(
    fd: ByteSource, size: int, session_id: str, max_line: int, budget: int = NUMBERING_BUDGET
) -> list[ImageRecord]:
    """Every image and document block of one transcript's message.content, in file order.

    The numbering holds the chain's offsets, found by a backward pass and
    checked by the image pass (history_service/numbering.py); when the check
    fails, the rule over every entry's facts answers, within `budget`.
    """
    check = ChainCheck(_walk_chain(fd, size, max_line, budget))
    records: list[tuple[int, tuple[int, int] | None, ImageRecord]] = []
    for line_number, offset, facts, source, probed in _entries(fd, size, max_line):
        at = check.entry(offset, facts)
        if source is None or probed is None:
            continue
        for block in media_blocks(probed):
            if not block.content_path:
                continue
            block_facts(source, probed, block)
            ref, pin = block_ref(offset, session_id, probed.entry, block, probed)
            assert block.facts is not None
            record = ImageRecord(
                session_id,
                facts.uuid,
                entry_name(facts.uuid, offset),
                line_number,
                offset,
                block.kind,
                block.image_index,
                block.content_path,
                declared_type(block.block),
                block.facts,
                ref,
                pin,
            )
            records.append((offset, at, record))
    verified, in_order = check.verified(), check.in_order
    if verified and not in_order:
        positions = check.positions({offset for offset, _, _ in records})
        records = [(offset, positions.get(offset), record) for offset, _, record in records]
    del check  # its memory is not held through the rule's pass below
    if not verified:
        positions = positions_by_offset(
            ((offset, facts) for _, offset, facts, _, _ in _entries(fd, size, max_line)), budget
        )
        records = [(offset, positions.get(offset), record) for offset, _, record in records]
    image_count = sum(1 for _, _, record in records if record.kind == "image")
    for _, at, record in records:
        if at is not None:
            number, offset = at
            first, *rest = record.content_path
            path = f"messages.{number}.content.{offset + first}"
            record.api_path = path + "".join(f".content.{k}" for k in rest)
        record.problems = problems_of(record, image_count)
    return [record for _, _, record in records]


def problems_of(record: ImageRecord, image_count: int) -> list[str]:
    """What the API would refuse about one image (nothing for a document but undecodable)."""
    facts = record.facts
    header = facts.header
    if not facts.decodable or (record.kind == "image" and header is None):
        return [UNDECODABLE]
    if record.kind != "image" or header is None:
        return []
    problems = []
    side = max(header.width, header.height)
    if side > API_HARD_MAX_SIDE:
        problems.append(OVER_HARD_SIDE)
    if side > API_MAX_SIDE and image_count > API_MANY_IMAGES:
        problems.append(OVER_SIDE_MANY)
    if facts.size_bytes > API_MAX_BYTES:
        problems.append(OVER_BYTES)
    return problems
