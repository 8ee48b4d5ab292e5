"""Slim copies of a transcript (`scrollback slim`, SlimSession).

A slim copy is the transcript with every image and document block, wherever
it sits, replaced by a non-empty text block that says what was cut, and every
other base64 payload (the `toolUseResult` copy of a Read image, for one)
replaced inside its string by the same kind of text. Everything else is the
original line byte for byte: runs of plain lines are copied as they are
(history_service.slim_scan), the payloads of the others are found by the
stripper (`probe_line`, docs/contract.md §3) and the blocks' byte ranges by
`scrollback.contract.blocks` over the line's small remainder
(history_service.slim_blocks), so no line is ever parsed whole, and the copy
is streamed line by line in bounded memory. An image may be downscaled
instead of cut (history_service.slim_downscale); the image list is
history_service.image_list.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

from history_service.errors import InvalidArgumentError
from history_service.slim_blocks import (
    BLANK_PNG_BASE64,
    OUT_CHUNK,
    FoundBlock,
    LineSource,
    block_facts,
    block_ref,
    declared_type,
    dumps_json,
    facts_of,
    json_string_text,
    media_blocks,
    stand_in_text,
    strings_with_parents,
    text_block,
)
from history_service.slim_downscale import (
    API_MAX_BYTES,
    API_MAX_SIDE,
    MIN_MAX_BYTES,
    MIN_MAX_SIDE,
    NOT_BASE64,
    Downscale,
    DownscaleAnswer,
    downscale_block,
)
from history_service.slim_scan import (
    count_content_images,
    forked_run,
    needs_probe,
    rollout_id_span,
    segments,
)
from scrollback.contract.blocks import iter_objects, matching_spans, top_level_string_span
from scrollback.contract.data_url import split_data_url
from scrollback.contract.enumeration import is_rollout_entry
from scrollback.contract.extraction import iter_decoded
from scrollback.contract.refs import OPENCODE, validate_id
from scrollback.contract.stripping import ProbedLine
from scrollback.linefile import NEWLINE, ByteSource
from scrollback.linewalk import line_count


@dataclass(frozen=True, slots=True)
class SlimOptions:
    """What a slim copy does with images; validated by `slim_options`."""

    fork_session_id: str = ""
    downscale: bool = False
    max_side: int = API_MAX_SIDE
    max_bytes: int = API_MAX_BYTES
    keep_last: int = 0


def slim_options(
    fork_session_id: str, downscale: bool, max_side: int, max_bytes: int, keep_last: int
) -> SlimOptions:
    """Validate a slim request's options (0 means the default)."""
    if fork_session_id:
        validate_id(fork_session_id, "fork session id")
    if max_side < 0 or max_bytes < 0 or keep_last < 0:
        raise InvalidArgumentError("max_side, max_bytes and keep_last must not be negative")
    side = max_side or API_MAX_SIDE
    size = max_bytes or API_MAX_BYTES
    if side < MIN_MAX_SIDE or size < MIN_MAX_BYTES:
        raise InvalidArgumentError(
            f"max_side must be at least {MIN_MAX_SIDE} and max_bytes at least {MIN_MAX_BYTES}"
        )
    return SlimOptions(fork_session_id, downscale, side, size, keep_last)


@dataclass(slots=True)
class SlimStats:
    """What one file's slim copy did."""

    lines: int = 0
    images_replaced: int = 0
    documents_replaced: int = 0
    copies_replaced: int = 0
    images_downscaled: int = 0
    images_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    omitted_tail_bytes: int = 0
    # Images cut instead of downscaled, by the reason their stand-in names.
    not_downscaled: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Edit:
    start: int
    end: int
    text: bytes


@dataclass
class _ImageCounter:
    """Counts the message.content images met, to keep the last N of a file."""

    total: int
    keep_last: int
    seen: int = 0

    def keeps_next(self) -> bool:
        keep = self.seen >= self.total - self.keep_last
        self.seen += 1
        return keep


def _line_edits(
    source: LineSource,
    probed: ProbedLine,
    session_id: str,
    options: SlimOptions,
    counter: _ImageCounter | None,
    stats: SlimStats,
) -> Generator[Downscale, DownscaleAnswer | None, list[_Edit]]:
    """The byte ranges of one line to replace, and what goes there (a generator: it
    yields a Downscale for each image to decode, and is sent back the answer)."""
    edits: list[_Edit] = []
    blocks = media_blocks(probed)
    spans = matching_spans(probed.probe, probed.entry, [b.block for b in blocks])
    covered: set[int] = set()  # cuts inside a replaced (or kept) block
    for block, span in zip(blocks, spans, strict=True):
        keep_as_is = (
            counter is not None
            and block.kind == "image"
            and block.content_path
            and counter.keeps_next()
        )
        edit = None
        if not keep_as_is:
            edit = yield from _block_edit(source, probed, block, span, session_id, options, stats)
        if edit is None:
            if keep_as_is:
                stats.images_kept += 1
            if block.cut >= 0 and (keep_as_is or span is not None):
                covered.add(block.cut)
            continue
        if block.cut >= 0:
            covered.add(block.cut)
        covered.update(
            k
            for k, (start, end) in enumerate(probed.spans)
            if edit.start <= start and end <= edit.end
        )
        edits.append(edit)
    edits.extend(_copy_edits(source, probed, covered, stats))
    if options.fork_session_id:
        span = top_level_string_span(probed.probe, "sessionId")
        if span is None and is_rollout_entry(probed.entry):
            span = rollout_id_span(probed.probe)
        if span is not None:
            edits.append(
                _Edit(
                    probed.line_offset(span[0]),
                    probed.line_offset(span[1]),
                    options.fork_session_id.encode("ascii"),
                )
            )
    edits.sort(key=lambda edit: edit.start)
    return edits


def _block_edit(
    source: LineSource,
    probed: ProbedLine,
    block: FoundBlock,
    span: tuple[int, int] | None,
    session_id: str,
    options: SlimOptions,
    stats: SlimStats,
) -> Generator[Downscale, DownscaleAnswer | None, _Edit | None]:
    """What replaces one block: its downscaled copy or its stand-in; None when it stays.

    A block whose byte range could not be told for sure (`span` None) has its
    payload cut inside its string instead.
    """
    block_facts(source, probed, block)
    facts = block.facts
    replacement: bytes | None = None
    reason = ""
    downscale = options.downscale and block.kind == "image" and span is not None
    if downscale and (facts is None or not facts.decodable):
        reason = NOT_BASE64
    elif downscale:
        outcome = yield from downscale_block(
            source, probed, block, options.max_side, options.max_bytes
        )
        if outcome is None:
            stats.images_kept += 1
            return None
        if isinstance(outcome, bytes):
            replacement = outcome
            stats.images_downscaled += 1
        else:
            reason = outcome
    if reason:
        stats.not_downscaled[reason] = stats.not_downscaled.get(reason, 0) + 1
    declared = declared_type(block.block)
    if replacement is None:
        ref, pin = block_ref(source.raw.start, session_id, probed.entry, block, probed)
        text = stand_in_text(block.kind, declared, facts, ref, pin, reason)
        replacement = dumps_json(text_block(block.block, text))
        if block.kind == "image":
            stats.images_replaced += 1
        else:
            stats.documents_replaced += 1
    if span is None:
        if block.cut < 0:
            return None
        start, end = probed.spans[block.cut]
        return _Edit(start, end, json_string_text(stand_in_text(block.kind, declared, facts)))
    return _Edit(probed.line_offset(span[0]), probed.line_offset(span[1]), replacement)


def _copy_edits(
    source: LineSource, probed: ProbedLine, covered: set[int], stats: SlimStats
) -> Iterator[_Edit]:
    """The stand-ins of the payloads outside every replaced block (copies, long base64)."""
    # Codex reads a rollout's event copies back, so their data URLs stay valid; an
    # opencode line (a rollout's shape) is a view of rows, and gets notes like any copy.
    codex = is_rollout_entry(probed.entry) and probed.entry.get("type") != OPENCODE
    in_urls = _data_url_cuts(probed) if codex else set()
    for k, (start, end) in enumerate(probed.spans):
        if k in covered:
            continue
        stats.copies_replaced += 1
        if k in in_urls:
            # A data URL stays one (Codex reads its event copies back): a blank pixel.
            yield _Edit(start, end, BLANK_PNG_BASE64)
            continue
        facts, _ = facts_of(iter_decoded(source.read, start, end), False)
        text = stand_in_text("payload", _copy_media_type(probed, k), facts)
        yield _Edit(start, end, json_string_text(text))


def _data_url_cuts(probed: ProbedLine) -> set[int]:
    """The cuts that are the payload of a data URL (a rollout's event copies of images)."""
    cuts = set()
    for text, _ in strings_with_parents(probed.entry):
        split = split_data_url(text)
        if split is not None and (k := probed.span_of(split[1])) >= 0:
            cuts.add(k)
    return cuts


def _copy_media_type(probed: ProbedLine, cut: int) -> str:
    """The media type named beside a payload copy (`toolUseResult.file.type`, ...), or ""."""
    placeholder = probed.placeholders[cut]
    for obj in iter_objects(probed.entry):
        if placeholder in obj.values():
            for key in ("media_type", "type", "mediaType", "mimeType"):
                value = obj.get(key)
                if isinstance(value, str) and "/" in value:
                    return value
            return ""
    return ""


def slim_file(
    fd: ByteSource,
    size: int,
    session_id: str,
    options: SlimOptions,
    max_line: int,
    stats: SlimStats,
) -> Generator[bytes | Downscale, DownscaleAnswer | None, None]:
    """The slim copy of one transcript's first `size` bytes, in pieces of at most OUT_CHUNK.

    Runs of lines with no image, document or payload are copied as they are
    (`segments`); each other line is probed and replaced where needed. A last
    line without a newline that is not yet a JSON object (being written) is
    left out, and counted in `stats.omitted_tail_bytes`. Each image to
    downscale is a `Downscale` yielded among the pieces: send back its answer.
    """
    counter = None
    if options.keep_last:
        counter = _ImageCounter(count_content_images(fd, size, max_line), options.keep_last)
    out = bytearray()
    for segment in segments(fd, size, max_line):
        if isinstance(segment, tuple):
            start, end, data = segment
            stats.lines += line_count(data)
            stats.bytes_read += end - start
            out += forked_run(data, options.fork_session_id) if options.fork_session_id else data
        else:
            raw = segment
            source = LineSource(raw)
            probed = (
                source.probe()
                if needs_probe(raw, bool(options.fork_session_id)) or not raw.terminated
                else None
            )
            if not raw.terminated and probed is None:
                # Being written: no prefix of a line is a JSON object (docs/contract.md §1).
                stats.omitted_tail_bytes = raw.size
                break
            edits: list[_Edit] = []
            if probed is not None:
                edits = yield from _line_edits(source, probed, session_id, options, counter, stats)
            stats.lines += 1
            stats.bytes_read += raw.next_start - raw.start
            position = 0
            for edit in [*edits, _Edit(raw.size, raw.size, b"")]:
                if not edits and raw.data is not None:
                    out += raw.data  # nothing to replace: the line as it is
                else:
                    for piece in source.pieces(position, edit.start):
                        out += piece
                        yield from _full_pieces(out, stats)
                out += edit.text
                position = edit.end
            if raw.terminated:
                out += NEWLINE
        yield from _full_pieces(out, stats)
    yield from _full_pieces(out, stats, everything=True)


def _full_pieces(out: bytearray, stats: SlimStats, everything: bool = False) -> Iterator[bytes]:
    """Pieces of exactly OUT_CHUNK taken from the front of `out` (and its rest if `everything`).

    A piece is never larger, whatever one line or one run of lines added at once: each is
    one message of the stream, and gRPC refuses a message over its limit.
    """
    while len(out) >= OUT_CHUNK or (everything and out):
        piece = bytes(out[:OUT_CHUNK])
        del out[:OUT_CHUNK]
        stats.bytes_written += len(piece)
        yield piece


def file_size(fd: ByteSource) -> int:
    """The size of an open file now: what a copy or a list reads up to."""
    return fd.stat().st_size


@dataclass(frozen=True, slots=True)
class SlimStart:
    """The first event of a slim copy."""

    session_id: str
    project_dir: str
    copy_session_id: str
    source: str = ""  # the session's source, named for an opencode copy (its format differs)


@dataclass(frozen=True, slots=True)
class SlimFileStart:
    """A file of a slim copy starts; its bytes and its SlimStats follow."""

    session_id: str
    relative_path: str
    is_subagent: bool
    source_size_bytes: int
    source_mode: int = 0
    source_modified_ns: int = 0


# What a slim copy's stream yields: its start, then per file a start, bytes and stats.
SlimEvent = SlimStart | SlimFileStart | bytes | SlimStats
# What its generator yields: those, and the downscales it asks its driver for.
SlimStep = SlimEvent | Downscale
