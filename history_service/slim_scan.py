"""Where a transcript's lines need more than a copy: the scan slim copies and the image list share.

The shared walker's runs of whole lines (`linewalk.line_runs`, SCAN_BLOCK at
a time) are cut around each line that may hold an image or document block or
a payload (`_Candidates`); the rest is copied as it is, its `sessionId`
replaced textually for a fork (`forked_run`).
"""

from __future__ import annotations

from collections.abc import Iterator

from history_service.lines import FileShrankError
from history_service.slim_blocks import LineSource, media_blocks
from scrollback.contract.blocks import top_level_string_span
from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    find_payload_spans,
    first_payload_candidate,
    parse_json_object,
)
from scrollback.linefile import ByteSource
from scrollback.linewalk import RawLine, join_lines, line_around, line_runs, split_lines

# A plain run: complete lines [start, end) of a block, newlines included, copied as they are.
PlainRun = tuple[int, int, bytes]
# Bytes read at once when looking for the lines that need more than a copy.
SCAN_BLOCK = 1024 * 1024


class _Candidates:
    """Where, in one block, a line may need a replacement: each kind's next offset, remembered.

    A block or document has its `"image"` / `"document"` type; a payload opens
    at a quote followed by at least the inline limit of quote-free bytes
    (`first_payload_candidate`). Each kind is searched again only once the
    scan has passed its last answer, so a block is searched about once per kind.
    """

    def __init__(self, block: bytes) -> None:
        self.block = block
        self.known: dict[int, int] = {}  # kind -> its next offset (-1: none left)

    def _find(self, kind: int, position: int) -> int:
        if kind == 0:
            return self.block.find(b'"image"', position)
        if kind == 1:
            return self.block.find(b'"document"', position)
        return first_payload_candidate(self.block, position, MIN_INLINE_LIMIT)

    def next(self, position: int) -> int:
        """The first offset at or after `position` that may need a look, or -1."""
        best = -1
        for kind in (0, 1, 2):
            at = self.known.get(kind, -2)
            if at == -2 or 0 <= at < position:
                at = self._find(kind, position)
                self.known[kind] = at
            if at >= 0 and (best < 0 or at < best):
                best = at
        return best


def rollout_id_span(text: bytes) -> tuple[int, int] | None:
    """The span of a Codex `session_meta` line's session id (`payload.id`), or None.

    Codex writes compact JSON, so the id is the text of the first `"id":"..."`
    after `"payload":{`; the line is parsed to check that it is that id.
    """
    if b'"session_meta"' not in text:
        return None
    entry = parse_json_object(text)
    payload = entry.get("payload") if entry is not None else None
    if entry is None or entry.get("type") != "session_meta" or not isinstance(payload, dict):
        return None
    old = payload.get("id")
    opening = text.find(b'"payload":{')
    if not isinstance(old, str) or opening < 0:
        return None
    needle = b'"id":"' + old.encode() + b'"'
    at = text.find(needle, opening)
    return None if at < 0 else (at + 6, at + len(needle) - 1)


def forked_run(data: bytes, fork_session_id: str) -> bytes:
    """A run of whole plain lines with each line's top-level sessionId replaced (no parse),
    and a Codex rollout's session id in its `session_meta` line."""
    new_id = fork_session_id.encode("ascii")
    lines = split_lines(data)
    for k, text in enumerate(lines):
        span = None
        if b'"sessionId"' in text:
            span = top_level_string_span(text, "sessionId")
        elif b'"session_meta"' in text:
            span = rollout_id_span(text)
        if span is not None:
            lines[k] = text[: span[0]] + new_id + text[span[1] :]
    return join_lines(lines)


def segments(fd: ByteSource, size: int, max_line: int) -> Iterator[PlainRun | RawLine]:
    """The file as runs of lines to copy as they are and single lines to look at, in order.

    The shared walker's runs of whole lines (`linewalk.line_runs`, SCAN_BLOCK
    at a time) are cut around each candidate line; a line longer than a block,
    and the last line when it has no newline, come as the walker's lines
    (bounded reads).
    """
    for run in line_runs(fd, 0, size, max_line, SCAN_BLOCK, FileShrankError):
        if isinstance(run, RawLine):
            yield run
            continue
        block, cut, position = run.data, run.cut, run.start
        at = 0
        candidates = _Candidates(block)
        while at < cut:
            candidate = candidates.next(at)
            if candidate < 0 or candidate >= cut:
                yield at + position, cut + position, block[at:cut]
                break
            start, end = line_around(block, candidate)
            if start > at:
                yield at + position, start + position, block[at:start]
            yield RawLine(position + start, position + end, block[start:end], True, fd)
            at = end + 1


def needs_probe(raw: RawLine, forked: bool) -> bool:
    """Whether a line may hold something to replace (a line without any is copied as is)."""
    data = raw.data
    if data is None or forked:
        return True
    if b'"image"' in data or b'"document"' in data:
        return True
    # No block of either kind: only a payload elsewhere (a copy) needs the probe.
    return bool(find_payload_spans(data, MIN_INLINE_LIMIT))


def count_content_images(fd: ByteSource, size: int, max_line: int) -> int:
    """How many image blocks the file's message.content trees hold (a first pass)."""
    total = 0
    for segment in segments(fd, size, max_line):
        if isinstance(segment, tuple) or (
            segment.data is not None
            and b'"image"' not in segment.data
            and b'"input_image"' not in segment.data
        ):
            continue  # no image block: nothing to count
        probed = LineSource(segment).probe()
        if probed is not None:
            total += sum(1 for b in media_blocks(probed) if b.kind == "image" and b.content_path)
    return total
