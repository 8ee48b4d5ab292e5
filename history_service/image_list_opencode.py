"""The image list of an opencode session's view (ListImages, `scrollback images`).

An opencode session is served as one rollout-shaped line per message
(scrollback/opencode/view.py, docs/contract.md §1); its images are the
`image/...` data URLs of its parts: a file part's `url` and a tool part's
attachments. Each is listed with the ref a window mints for it
(`<session>/<part id>/<index within the part>`, scrollback/opencode/naming.py;
the message's name and the index in its line for an image outside a named
part), its pin, decoded size, sha256 and header pixels, and what the API would
refuse. opencode keeps no Claude API message list, so no image has an
`api_path`. A line is probed only when it holds a data URL of an image; a line
still too large once its payloads are cut is the window's stub and lists
nothing, as its window entry names no image.
"""

from __future__ import annotations

from collections.abc import Iterator

from history_service.image_list import ImageRecord, problems_of
from history_service.slim_blocks import LineSource, PayloadFacts, facts_of
from history_service.slim_scan import segments
from scrollback.contract.enumeration import iter_images
from scrollback.contract.extraction import iter_decoded
from scrollback.contract.refs import entry_name
from scrollback.contract.stripping import ProbedLine
from scrollback.linefile import ByteSource
from scrollback.linewalk import RawLine, split_lines
from scrollback.opencode.naming import entry_image_names

# Text every line holding an image data URL has; a line without it is not probed.
_IMAGE_URL = b"data:image/"


def _image_lines(fd: ByteSource, size: int, max_line: int) -> Iterator[tuple[int, RawLine]]:
    """(line number, line) of each line that may hold an image data URL, in file order."""
    line_number = 0
    for segment in segments(fd, size, max_line):
        if isinstance(segment, RawLine):
            line_number += 1
            if segment.data is None or _IMAGE_URL in segment.data:
                yield line_number, segment
            continue
        offset, _, block = segment
        for text in split_lines(block):
            line_number += 1
            if _IMAGE_URL in text:
                yield line_number, RawLine(offset, offset + len(text), text, True, fd)
            offset += len(text) + 1


def inline_facts(text: str) -> PayloadFacts:
    """Facts of a payload small enough to stay in the probe (its base64 text)."""
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        return PayloadFacts(0, "", None, False)
    return facts_of(
        iter_decoded(lambda start, length: data[start : start + length], 0, len(data)), False
    )[0]


def probed_names(session_id: str, offset: int, probed: ProbedLine) -> dict[str, tuple[str, str]]:
    """The placeholder of each cut image of a probed line of the view -> its (ref, pin), as a
    window mints them (the line at `offset`)."""
    entry = probed.entry
    uuid = entry.get("uuid")
    names = entry_image_names(entry)
    found: dict[str, tuple[str, str]] = {}
    for index, (text, _) in enumerate(iter_images(entry)):
        cut = probed.span_of(text) if isinstance(text, str) else -1
        if cut >= 0:
            default = (entry_name(uuid if isinstance(uuid, str) else "", offset), index)
            name, within = names.get(index, default)
            found[text] = (f"{session_id}/{name}/{within}", probed.pins[cut])
    return found


def _line_images(
    session_id: str, line_number: int, raw: RawLine, probed: ProbedLine
) -> Iterator[ImageRecord]:
    """The images of one probed line of the view, in index order."""
    entry = probed.entry
    uuid = entry.get("uuid")
    message_id = uuid if isinstance(uuid, str) else ""
    names = entry_image_names(entry)
    source = LineSource(raw)
    for index, (text, media_type) in enumerate(iter_images(entry)):
        if not isinstance(text, str) or not text:
            continue  # an empty payload is a failed upload: no image to list
        cut = probed.span_of(text)
        if cut >= 0:
            start, end = probed.spans[cut]
            facts = facts_of(iter_decoded(source.read, start, end, index), False)[0]
        else:
            facts = inline_facts(text)
        name, within = names.get(index, (entry_name(message_id, raw.start), index))
        yield ImageRecord(
            session_id,
            message_id,
            name,
            line_number,
            raw.start,
            "image",
            within,
            (),
            media_type if isinstance(media_type, str) else "",
            facts,
            f"{session_id}/{name}/{within}" if cut >= 0 else "",
            probed.pins[cut] if cut >= 0 else "",
        )


def list_opencode_images(
    fd: ByteSource, size: int, session_id: str, max_line: int
) -> list[ImageRecord]:
    """Every image of an opencode session's view, in file order (module docstring)."""
    records: list[ImageRecord] = []
    for line_number, raw in _image_lines(fd, size, max_line):
        probed = LineSource(raw).probe_sized()
        if isinstance(probed, ProbedLine):
            records += _line_images(session_id, line_number, raw, probed)
    for record in records:
        record.problems = problems_of(record, len(records))
    return records
