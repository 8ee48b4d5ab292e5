"""Slim copies of a transcript and the list of its images (`scrollback slim`, `scrollback images`).

A slim copy is the transcript with every image and document block, wherever
it sits, replaced by a non-empty text block that says what was cut, and every
other base64 payload (the `toolUseResult` copy of a Read image, for one)
replaced inside its string by the same kind of text. Everything else is the
original line byte for byte: the payloads are found by the stripper
(`probe_line`, docs/contract.md §3) and the blocks' byte ranges by
`scrollback.contract.blocks` over the line's small remainder, so no line is
ever parsed whole, and the copy is streamed line by line in bounded memory.

A downscale never holds an image whole either: its payload is read slice by
slice from the line (`PayloadReader`) and shrunk while libvips decodes it
(scrollback.imaging). `slim_file` does not decode itself: it yields a
`Downscale` request and is sent back the answer, so its driver runs the
decode under the worker's decode budget (scrollback.server.decode_budget) and
may refuse one that does not fit it; an image not downscaled is cut, its
stand-in text naming why.

The image list gives each image and document block of `message.content` with
its place in the API's message list (docs/contract.md §14 states the rule),
its size, its pixel size from the header, and what the API would refuse.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import io
import itertools
import json
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import orjson
import pybase64

from history_service.errors import InvalidArgumentError
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
from scrollback.contract.blocks import iter_objects, matching_spans, top_level_string_span
from scrollback.contract.enumeration import iter_image_blocks
from scrollback.contract.extraction import (
    ImageNotStrippedError,
    PayloadReader,
    UndecodablePayloadError,
    iter_decoded,
)
from scrollback.contract.image_header import ImageHeader, read_header
from scrollback.contract.reading import ByteReader
from scrollback.contract.refs import ID_PATTERN, validate_id
from scrollback.contract.stripping import (
    MIN_INLINE_LIMIT,
    ProbedLine,
    find_payload_spans,
    first_payload_candidate,
    parse_json_object,
    probe_line,
    probe_line_streamed,
)
from scrollback.contract.top_level import top_level_strings
from scrollback.imaging import UndecodableImageError, buffered, decode_cost, shrink_on_load
from scrollback.linefile import NEWLINE, ByteSource, LineFile
from scrollback.linewalk import (
    RawLine,
    join_lines,
    line_around,
    line_count,
    line_runs,
    split_lines,
)

if TYPE_CHECKING:
    import pyvips

# The API's limits on one image (its documented maximums).
API_MAX_SIDE = 2000
API_MAX_BYTES = 5 * 1024 * 1024
API_HARD_MAX_SIDE = 8000
# More images than this in one request and each must be within API_MAX_SIDE.
API_MANY_IMAGES = 20
# The smallest --max-side and --max-bytes a request may ask for.
MIN_MAX_SIDE = 16
MIN_MAX_BYTES = 1024
# Images over this many pixels are never decoded for a downscale (a bomb).
MAX_DECODE_PIXELS = 64_000_000
JPEG_QUALITY = 85
# Output is sent in pieces of at most this size.
OUT_CHUNK = 1024 * 1024
MEDIA_KINDS = ("image", "document")

# Problems of an image, as `scrollback images` names them.
OVER_HARD_SIDE = "over_8000_px"
OVER_SIDE_MANY = "over_2000_px_with_many_images"
OVER_BYTES = "over_5_mb"
UNDECODABLE = "undecodable"


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


# The decoded bytes of a payload kept for its header: a JPEG's frame header
# after large EXIF blocks, and the fixed headers of the other formats.
HEADER_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class PayloadFacts:
    """What a payload's decoded bytes are: size, sha256, header; or undecodable."""

    size_bytes: int
    sha256: str
    header: ImageHeader | None
    decodable: bool


def _facts_of(pieces: Iterator[bytes], keep: bool) -> tuple[PayloadFacts, bytes | None]:
    """Hash decoded pieces; the header from the first bytes; the whole bytes if `keep`."""
    digest = hashlib.sha256()
    head = bytearray()
    whole = bytearray() if keep else None
    size = 0
    try:
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
            if len(head) < HEADER_BYTES:
                head += piece[: HEADER_BYTES - len(head)]
            if whole is not None:
                whole += piece
    except (UndecodablePayloadError, LookupError, binascii.Error, ValueError):
        return PayloadFacts(size, "", None, False), None
    facts = PayloadFacts(size, digest.hexdigest(), read_header(io.BytesIO(head)), True)
    return facts, bytes(whole) if whole is not None else None


def _inline_facts(data: str, keep: bool) -> tuple[PayloadFacts, bytes | None]:
    """Facts of a payload small enough that it stayed in the parsed remainder."""
    try:
        decoded: bytes = pybase64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return PayloadFacts(0, "", None, False), None
    return _facts_of(iter((decoded,)), keep)


@dataclass(slots=True)
class FoundBlock:
    """One image or document block of a line."""

    block: dict[str, Any]
    kind: str
    cut: int  # the probe's cut holding its data, or -1 when the data stayed inline
    image_index: int  # its index by the enumeration rule (docs/contract.md §2), or -1
    content_path: tuple[int, ...]  # indexes in message.content (and nested content), or ()
    facts: PayloadFacts | None = None
    data: bytes | None = None


def _is_media_block(value: dict[str, Any]) -> bool:
    source = value.get("source")
    return (
        value.get("type") in MEDIA_KINDS
        and isinstance(source, dict)
        and isinstance(source.get("data"), str)
    )


def _content_paths(entry: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """id(block) -> its path in message.content, descending into `content` arrays (§2's walk)."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    paths: dict[int, tuple[int, ...]] = {}
    if not isinstance(content, list):
        return paths
    stack: list[tuple[tuple[int, ...], list[Any]]] = [((), content)]
    while stack:
        prefix, items = stack.pop()
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            path = (*prefix, position)
            paths[id(item)] = path
            inner = item.get("content")
            if isinstance(inner, list):
                stack.append((path, inner))
    return paths


def media_blocks(probed: ProbedLine) -> list[FoundBlock]:
    """Every image and document block of a probed line, in document order."""
    entry = probed.entry
    indexes = {id(block): i for i, block in enumerate(iter_image_blocks(entry))}
    paths = _content_paths(entry)
    found: list[FoundBlock] = []
    skip: set[int] = set()
    for obj in iter_objects(entry):
        if id(obj) in skip or not _is_media_block(obj):
            continue
        source = obj["source"]
        skip.add(id(source))
        found.append(
            FoundBlock(
                obj,
                str(obj["type"]),
                probed.span_of(source["data"]),
                indexes.get(id(obj), -1),
                paths.get(id(obj), ()),
            )
        )
    return found


class LineSource:
    """One line's bytes, held or read in bounded pieces from its file."""

    def __init__(self, raw: RawLine) -> None:
        self.raw = raw
        data, source = raw.data, raw.fd
        if data is not None:
            self.read: ByteReader = lambda start, length: data[start : start + length]
        elif source is not None:
            self.read = LineFile(source).line_reader(raw.start, raw.size, FileShrankError)
        else:
            raise ValueError("a line too large to hold needs its file")

    def probe(self) -> ProbedLine | None:
        """The line's payloads cut and its remainder parsed (None: not a JSON object)."""
        if self.raw.data is not None:
            return probe_line(self.raw.data, MIN_INLINE_LIMIT)
        return probe_line_streamed(self.read, self.raw.size, MIN_INLINE_LIMIT)

    def pieces(self, start: int, end: int) -> Iterator[bytes]:
        """The line's bytes [start, end) in pieces of at most OUT_CHUNK."""
        while start < end:
            length = min(OUT_CHUNK, end - start)
            yield bytes(self.read(start, length))
            start += length


def block_facts(
    source: LineSource, probed: ProbedLine, block: FoundBlock, keep: bool = False
) -> None:
    """Decode a block's payload once: its size, sha256 and header (and bytes with `keep`)."""
    if block.cut >= 0:
        start, end = probed.spans[block.cut]
        facts, data = _facts_of(iter_decoded(source.read, start, end, block.image_index), keep)
    else:
        facts, data = _inline_facts(block.block["source"]["data"], keep)
    block.facts, block.data = facts, data


def _declared(block: dict[str, Any]) -> str:
    media_type = block.get("source", {}).get("media_type")
    return media_type if isinstance(media_type, str) else ""


def stand_in_text(
    kind: str,
    declared: str,
    facts: PayloadFacts | None,
    ref: str = "",
    pin: str = "",
    reason: str = "",
) -> str:
    """The text that stands where an image or document was cut: never empty."""
    parts = [declared or "unknown type"]
    if facts is not None and facts.decodable:
        parts.append(f"{facts.size_bytes:,} bytes")
        if facts.header is not None:
            parts.append(f"{facts.header.width}x{facts.header.height} px")
    elif facts is not None:
        parts.append("undecodable")
    if reason:
        parts.append(f"not downscaled: {reason}")
    where = []
    if ref:
        where.append(f"ref {ref} pin {pin}")
    if facts is not None and facts.sha256:
        where.append(f"sha256 {facts.sha256}")
    served = f"; Scrollback still serves it: {', '.join(where)}" if where else ""
    return f"[{kind} cut by scrollback slim: {', '.join(parts)}{served}]"


def _json_string_text(text: str) -> bytes:
    """`text` as the raw inside of a JSON string (ASCII, escaped as needed)."""
    return json.dumps(text)[1:-1].encode("ascii")


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # lone surrogates in kept fields
        return json.dumps(value, separators=(",", ":")).encode("ascii")


# Why an image was not downscaled, as its stand-in text says.
NOT_DECODABLE = "not a decodable PNG, JPEG, GIF or WebP"
OVER_DECODE_PIXELS = f"over {MAX_DECODE_PIXELS:,} pixels, never decoded"
OVER_DECODE_BUDGET = "larger than the server's decode memory budget, never decoded"


def does_not_fit(max_bytes: int) -> str:
    """The reason of an image that stays over `max_bytes` at the smallest side tried."""
    return f"does not fit in {max_bytes:,} bytes"


@dataclass(frozen=True, slots=True)
class Downscaled:
    """An image re-encoded within the limits: its media type and bytes."""

    media_type: str
    data: bytes


# The answer to a Downscale: the new image, or why there is none.
DownscaleAnswer = Downscaled | str


@dataclass(frozen=True, slots=True)
class Downscale:
    """A decode `slim_file` asks its driver for; the driver sends back `work()`'s answer.

    `cost` is the most the decode may hold (scrollback.imaging's `decode_cost`);
    `work` blocks and may run on any thread.
    """

    cost: int
    work: Callable[[], DownscaleAnswer]


def downscale_image(
    open_image: Callable[[], IO[bytes]], pixels: int, max_side: int, max_bytes: int
) -> DownscaleAnswer:
    """The image re-encoded within max_side and max_bytes, or why not (blocking).

    Shrunk while decoded (scrollback.imaging), once, to at most max_side; then
    PNG where it has transparency, JPEG otherwise, smaller by quarters until the
    bytes fit. `pixels` is what its header states, already checked by the caller.
    """

    def encode(frame: pyvips.Image) -> DownscaleAnswer:
        if frame.interpretation not in ("srgb", "b-w"):
            frame = frame.colourspace("srgb")  # CMYK, 16-bit: what the API takes
        frame = frame.copy_memory()  # the shrunk frame, decoded once for every step
        longest = max(frame.width, frame.height)
        side = longest
        while side >= MIN_MAX_SIDE:
            step = frame if side == longest else frame.thumbnail_image(side, height=side)
            if frame.hasalpha():
                media_type, data = "image/png", step.pngsave_buffer(keep="none")
            else:
                media_type = "image/jpeg"
                data = step.jpegsave_buffer(Q=JPEG_QUALITY, keep="none")
            if len(data) <= max_bytes:
                return Downscaled(media_type, data)
            side = side * 3 // 4
        return does_not_fit(max_bytes)

    try:
        with open_image() as stream:
            return shrink_on_load(stream, pixels, max_side, encode)
    except (UndecodableImageError, UndecodablePayloadError, ImageNotStrippedError):
        return NOT_DECODABLE


def _payload_opener(
    source: LineSource, probed: ProbedLine, block: FoundBlock
) -> Callable[[], IO[bytes]]:
    """A function opening the block's decoded payload as a file, read slice by slice."""
    assert block.facts is not None
    size = block.facts.size_bytes
    if block.cut < 0:
        decoded = pybase64.b64decode(block.block["source"]["data"].encode("ascii"))
        return lambda: io.BytesIO(decoded)
    start, end = probed.spans[block.cut]
    # Escaped is always right (escapes are undone as the payload is decoded forward).
    reader = PayloadReader(source.read, start, end, escaped=True, index=block.image_index)
    return lambda: buffered(reader.read, size)


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


def _ref(session_id: str, uuid: Any, block: FoundBlock, probed: ProbedLine) -> tuple[str, str]:
    """The ref and pin by which the media service serves a cut image; ("", "") if none."""
    if (
        block.kind != "image"
        or block.image_index < 0
        or block.cut < 0
        or not isinstance(uuid, str)
        or not ID_PATTERN.fullmatch(uuid)
    ):
        return "", ""
    return f"{session_id}/{uuid}/{block.image_index}", probed.pins[block.cut]


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
    covered: set[int] = set()  # cuts inside a replaced block
    uuid = probed.entry.get("uuid")
    for block, span in zip(blocks, spans, strict=True):
        keep_as_is = (
            counter is not None
            and block.kind == "image"
            and block.content_path
            and counter.keeps_next()
        )
        if keep_as_is:
            stats.images_kept += 1
            if block.cut >= 0:
                covered.add(block.cut)
            continue
        block_facts(source, probed, block)
        facts = block.facts
        replacement: bytes | None = None
        reason = ""
        downscale = options.downscale and block.kind == "image" and span is not None
        if downscale and facts is not None and facts.decodable:
            header = facts.header
            fits = (
                header is not None
                and max(header.width, header.height) <= options.max_side
                and facts.size_bytes <= options.max_bytes
                and header.media_type == _declared(block.block)
            )
            if fits:
                stats.images_kept += 1
                if block.cut >= 0:
                    covered.add(block.cut)
                continue
            if header is None:
                reason = NOT_DECODABLE
            elif header.pixels > MAX_DECODE_PIXELS:
                reason = OVER_DECODE_PIXELS
            else:
                work = functools.partial(
                    downscale_image,
                    _payload_opener(source, probed, block),
                    header.pixels,
                    options.max_side,
                    options.max_bytes,
                )
                cost = decode_cost(header.media_type, header.pixels, facts.size_bytes)
                answer = yield Downscale(cost, work)
                if isinstance(answer, Downscaled):
                    source_field = dict(block.block["source"])
                    source_field.update(
                        type="base64",
                        media_type=answer.media_type,
                        data=base64.b64encode(answer.data).decode(),
                    )
                    replacement = _dumps({**block.block, "source": source_field})
                    stats.images_downscaled += 1
                else:
                    reason = answer or NOT_DECODABLE
        if replacement is None:
            ref, pin = _ref(session_id, uuid, block, probed)
            text = stand_in_text(block.kind, _declared(block.block), facts, ref, pin, reason)
            replacement = _dumps({"type": "text", "text": text})
            if block.kind == "image":
                stats.images_replaced += 1
            else:
                stats.documents_replaced += 1
        if span is None:
            # Its range could not be told for sure: cut its payload inside the string instead.
            if block.cut < 0:
                continue
            start, end = probed.spans[block.cut]
            text = stand_in_text(block.kind, _declared(block.block), facts)
            edits.append(_Edit(start, end, _json_string_text(text)))
            covered.add(block.cut)
            continue
        low, high = probed.line_offset(span[0]), probed.line_offset(span[1])
        if block.cut >= 0:
            covered.add(block.cut)
        covered.update(
            k for k, (start, end) in enumerate(probed.spans) if low <= start and end <= high
        )
        edits.append(_Edit(low, high, replacement))
    for k, (start, end) in enumerate(probed.spans):
        if k in covered:
            continue
        facts, _ = _facts_of(iter_decoded(source.read, start, end), False)
        text = stand_in_text("payload", _copy_media_type(probed, k), facts)
        edits.append(_Edit(start, end, _json_string_text(text)))
        stats.copies_replaced += 1
    if options.fork_session_id:
        span = top_level_string_span(probed.probe, "sessionId")
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


def _needs_probe(raw: RawLine, options: SlimOptions) -> bool:
    """Whether a line may hold something to replace (a line without any is copied as is)."""
    data = raw.data
    if data is None or options.fork_session_id:
        return True
    if b'"image"' in data or b'"document"' in data:
        return True
    # No block of either kind: only a payload elsewhere (a copy) needs the probe.
    return bool(find_payload_spans(data, MIN_INLINE_LIMIT))


def count_content_images(fd: ByteSource, size: int, max_line: int) -> int:
    """How many image blocks the file's message.content trees hold (a first pass)."""
    total = 0
    for segment in _segments(fd, size, max_line):
        if isinstance(segment, tuple) or (
            segment.data is not None and b'"image"' not in segment.data
        ):
            continue  # no image block: nothing to count
        probed = LineSource(segment).probe()
        if probed is not None:
            total += sum(1 for b in media_blocks(probed) if b.kind == "image" and b.content_path)
    return total


# A plain run: complete lines [start, end) of a block, newlines included, copied as they are.
_PlainRun = tuple[int, int, bytes]
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


def _forked_run(data: bytes, fork_session_id: str) -> bytes:
    """A run of whole plain lines with each line's top-level sessionId replaced (no parse)."""
    new_id = fork_session_id.encode("ascii")
    lines = split_lines(data)
    for k, text in enumerate(lines):
        if b'"sessionId"' in text:
            span = top_level_string_span(text, "sessionId")
            if span is not None:
                lines[k] = text[: span[0]] + new_id + text[span[1] :]
    return join_lines(lines)


def _segments(fd: ByteSource, size: int, max_line: int) -> Iterator[_PlainRun | RawLine]:
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
    (`_segments`); each other line is probed and replaced where needed. A last
    line without a newline that is not yet a JSON object (being written) is
    left out, and counted in `stats.omitted_tail_bytes`. Each image to
    downscale is a `Downscale` yielded among the pieces: send back its answer.
    """
    counter = None
    if options.keep_last:
        counter = _ImageCounter(count_content_images(fd, size, max_line), options.keep_last)
    out = bytearray()
    for segment in _segments(fd, size, max_line):
        if isinstance(segment, tuple):
            start, end, data = segment
            stats.lines += line_count(data)
            stats.bytes_read += end - start
            out += _forked_run(data, options.fork_session_id) if options.fork_session_id else data
        else:
            raw = segment
            source = LineSource(raw)
            probed = source.probe() if _needs_probe(raw, options) or not raw.terminated else None
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


# ---------------------------------------------------------------------------
# The image list
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class ImageRecord:
    """One image or document block of `message.content`, as `scrollback images` lists it."""

    session_id: str
    entry_uuid: str
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

    Lines with no image, document or payload (`_segments`) are parsed only for
    what the API numbering needs (no line or probe given); the others are probed.
    """
    line_number = 0
    for segment in _segments(fd, size, max_line):
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
        probed = source.probe()
        if probed is not None:
            yield line_number, segment.start, entry_facts(probed.entry), source, probed


def _last_newline(fd: ByteSource, size: int) -> int:
    """Where the file's complete lines end (just after its last newline before `size`), or 0."""
    end = size
    while end > 0:
        start = max(0, end - SCAN_BLOCK)
        block = LineFile(fd).read(end - start, start)
        found = block.rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _lines_backward(fd: ByteSource, end: int, max_line: int) -> Iterator[BackLine]:
    """(start, end, bytes) of the lines before `end` (0 or just after a newline), newest first.

    Each block is split at C speed; a line over `max_line` is never held (None).
    """
    if end <= 0:
        return
    line_end = position = end - 1  # the newline ending the line being gathered
    pieces: list[bytes] = []  # its bytes gathered so far, newest first
    held = 0
    while position > 0:
        start = max(0, position - SCAN_BLOCK)
        block = LineFile(fd).read(position - start, start)
        if len(block) != position - start:
            raise FileShrankError()
        parts = block.split(b"\n")
        if len(parts) > 1:
            last = parts[-1]
            line_start = position - len(last)
            size = line_end - line_start
            data = b"".join([last, *reversed(pieces)]) if size <= max_line else None
            yield line_start, line_end, data
            line_end = line_start - 1
            for k in range(len(parts) - 2, 0, -1):
                text = parts[k]
                line_start = line_end - len(text)
                yield line_start, line_end, text if len(text) <= max_line else None
                line_end = line_start - 1
            pieces.clear()
            held = 0
        first = parts[0]
        held += len(first)
        if held <= max_line:
            pieces.append(first)
        else:
            pieces.clear()  # a line over the max line size: none of it is kept
        position = start
    yield 0, line_end, b"".join(reversed(pieces)) if line_end <= max_line else None


# The members the chain walk reads of a line too long to hold.
_CHAIN_KEYS = frozenset({"uuid", "parentUuid"})


def _back_entry(line: BackLine, fd: ByteSource, whole: bool) -> dict[str, Any] | None:
    """The entry of one line of the backward pass.

    A line too long to hold is probed when `whole` is asked for, else only its
    top-level `uuid` and `parentUuid` are read from its two ends (bounded windows).
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
    probed = LineSource(RawLine(start, end, None, False, fd)).probe()
    return probed.entry if probed is not None else None


def _walk_chain(fd: ByteSource, size: int, max_line: int, budget: int) -> ChainWalk:
    """The candidate chain, from the file's end back to its root (numbering.py, pass 1)."""
    walk = ChainWalk(budget)
    complete = _last_newline(fd, size)
    lines: Iterator[BackLine] = _lines_backward(fd, complete, max_line)
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
            ref, pin = _ref(session_id, facts.uuid, block, probed)
            assert block.facts is not None
            record = ImageRecord(
                session_id,
                facts.uuid,
                line_number,
                offset,
                block.kind,
                block.image_index,
                block.content_path,
                _declared(block.block),
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


def file_size(fd: ByteSource) -> int:
    """The size of an open file now: what a copy or a list reads up to."""
    return fd.stat().st_size


@dataclass(frozen=True, slots=True)
class SlimStart:
    """The first event of a slim copy."""

    session_id: str
    project_dir: str
    copy_session_id: str


@dataclass(frozen=True, slots=True)
class SlimFileStart:
    """A file of a slim copy starts; its bytes and its SlimStats follow."""

    session_id: str
    relative_path: str
    is_subagent: bool
    source_size_bytes: int


# What a slim copy's stream yields: its start, then per file a start, bytes and stats.
SlimEvent = SlimStart | SlimFileStart | bytes | SlimStats
# What its generator yields: those, and the downscales it asks its driver for.
SlimStep = SlimEvent | Downscale
