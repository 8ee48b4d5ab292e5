"""The image list of a Gemini CLI session (ListImages, `scrollback images`; docs/contract.md §14).

A Gemini session is read as its live messages (scrollback.gemini_live), one per
line; each message's images are its `inlineData` image parts in the contract's
enumeration (§2, `iter_gemini_inline`), each listed with its decoded size,
sha256 and pixel size from its header, its ref and pin (as ReadWindow mints
them) and what the API would refuse. Gemini's messages are no Claude API
message list, so no `api_path` is given.
"""

from __future__ import annotations

from history_service.image_list import ImageRecord, problems_of
from history_service.lines import FileShrankError, is_blank, iter_lines_forward
from history_service.slim_blocks import LineSource, PayloadFacts, facts_of, inline_facts
from scrollback.contract.enumeration import is_gemini_message, iter_gemini_inline
from scrollback.contract.extraction import iter_decoded
from scrollback.contract.refs import entry_name
from scrollback.contract.stripping import ProbedLine
from scrollback.linefile import ByteSource


def list_gemini_images(
    fd: ByteSource, size: int, session_id: str, max_line: int
) -> list[ImageRecord]:
    """Every image of a Gemini session's live messages, in order."""
    records: list[ImageRecord] = []
    line_number = 0
    for raw in iter_lines_forward(fd, 0, size, max_line):
        if is_blank(raw):
            continue
        line_number += 1
        source = LineSource(raw)
        probed = source.probe_sized()
        if not isinstance(probed, ProbedLine) or not is_gemini_message(probed.entry):
            continue
        message_id = probed.entry["id"]
        name = entry_name(message_id, raw.start)
        for index, inline in enumerate(iter_gemini_inline(probed.entry)):
            data = inline.get("data")
            cut = probed.span_of(data) if isinstance(data, str) else -1
            pin = probed.pins[cut] if cut >= 0 else ""
            if cut >= 0:
                start, end = probed.spans[cut]
                try:
                    facts, _ = facts_of(iter_decoded(source.read, start, end, index), False)
                except FileShrankError:
                    return records
            elif isinstance(data, str):
                facts, _ = inline_facts(data, False)
            else:
                facts = PayloadFacts(0, "", None, False)
            declared = inline.get("mimeType")
            records.append(
                ImageRecord(
                    session_id,
                    message_id,
                    name,
                    line_number,
                    raw.start,
                    "image",
                    index,
                    (),
                    declared if isinstance(declared, str) else "",
                    facts,
                    f"{session_id}/{name}/{index}" if cut >= 0 else "",
                    pin,
                )
            )
    image_count = len(records)
    for record in records:
        record.problems = problems_of(record, image_count)
    return records
