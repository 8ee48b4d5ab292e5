"""A slim copy of an opencode session, in opencode's own export format (docs/contract.md §14).

The copy is the JSON `opencode export` writes (scrollback/opencode/export.py):
the session's info, then each message of its view (scrollback/opencode/view.py)
as `{"info": <message>, "parts": [<part>, ...]}`, so `opencode import FILE`
adds it to opencode as a session of its own. Every id is given the copy's tag
(import skips ids it already has), a message's `parentID` too. Each line is
probed, never parsed whole (its payloads cut by the stripper, §3); then:

- a file part whose `url` is an image data URL, or any data URL whose payload
  was cut, becomes a text part naming the file, its type, size and pixels, and
  the ref and pin by which Scrollback still serves it from the original
  session (the window's ref, §2) with its sha256;
- a tool part's attachments that are such files are taken out of
  `state.attachments` and named in one text part that follows the tool part;
- any other payload the stripper cut has its string replaced by such a note.

A message still over the max line size once its payloads are cut is left out
(counted in `omitted_tail_bytes`). The copy goes out in pieces of at most
OUT_CHUNK; a message is held once its payloads are cut, never a payload.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from history_service.errors import InvalidArgumentError
from history_service.image_list_opencode import inline_facts, probed_names
from history_service.lines import FileShrankError
from history_service.slim import (
    SlimEvent,
    SlimFileStart,
    SlimOptions,
    SlimStart,
    SlimStats,
    file_size,
)
from history_service.slim_blocks import (
    OUT_CHUNK,
    LineSource,
    PayloadFacts,
    dumps_json,
    facts_of,
    stand_in_text,
)
from scrollback.contract.data_url import is_image_media_type, split_data_url
from scrollback.contract.extraction import iter_decoded
from scrollback.contract.refs import OPENCODE
from scrollback.contract.stripping import ProbedLine
from scrollback.linefile import ByteSource
from scrollback.linewalk import RawLine, lines
from scrollback.opencode.export import SessionInfos, copy_tag
from scrollback.principals import Principal
from scrollback.transcripts import SessionNotFoundError, TranscriptFile, TranscriptSource


@dataclass(frozen=True, slots=True)
class CopyIds:
    """How the copy names things: its ids' tag, its session id, the original's name."""

    tag: str
    session_id: str
    original: str  # the original session as refs name it

    def of(self, value: Any) -> Any:
        """An id of the original, as the copy names it (anything else as it is)."""
        return value + self.tag if isinstance(value, str) and value else value


class _Line:
    """One probed message line: its cuts, their refs, and what was replaced."""

    def __init__(self, raw: RawLine, probed: ProbedLine, ids: CopyIds, stats: SlimStats) -> None:
        self.source = LineSource(raw)
        self.probed = probed
        self.stats = stats
        self.cuts = {text: k for k, text in enumerate(probed.placeholders)}
        self.names = probed_names(ids.original, raw.start, probed)

    def _facts(self, mime: str, body: str) -> tuple[PayloadFacts, int]:
        """A payload's facts, and its cut (-1: it stayed inline)."""
        cut = self.cuts.get(body, -1)
        if cut < 0:
            return inline_facts(body), -1
        start, end = self.probed.spans[cut]
        return facts_of(iter_decoded(self.source.read, start, end), False)[0], cut

    def file_note(self, url: Any, filename: Any) -> str | None:
        """The text standing for a file's data URL: an image's, or any whose payload was cut;
        None for one kept (a small file of another type, or no data URL)."""
        split = split_data_url(url) if isinstance(url, str) else None
        if split is None:
            return None
        mime, body = split
        image = is_image_media_type(mime)
        if not image and body not in self.cuts:
            return None
        facts, cut = self._facts(mime, body)
        ref, pin = self.names.get(body, ("", "")) if cut >= 0 and image else ("", "")
        name = f" {filename}" if isinstance(filename, str) and filename else ""
        if image:
            self.stats.images_replaced += 1
        else:
            self.stats.documents_replaced += 1
        return stand_in_text(("image" if image else "file") + name, mime, facts, ref, pin)

    def replace_cuts(self, value: Any) -> None:
        """Every other cut payload's string under `value` replaced by a note (in place)."""
        stack: list[Any] = [value]
        while stack:
            holder = stack.pop()
            keys = holder.keys() if isinstance(holder, dict) else range(len(holder))
            for key in keys:
                item = holder[key]
                if isinstance(item, dict | list):
                    stack.append(item)
                elif isinstance(item, str):
                    note = self._payload_note(item)
                    if note is not None:
                        holder[key] = note

    def _payload_note(self, text: str) -> str | None:
        split = split_data_url(text)
        mime, body = split if split is not None else ("", text)
        if body not in self.cuts:
            return None
        self.stats.copies_replaced += 1
        return stand_in_text("payload", mime, self._facts(mime, body)[0])


def _part(line: _Line, part: Any, message_id: str, ids: CopyIds) -> list[dict[str, Any]]:
    """A part of the copy (module docstring): as it was, or its notes in its place."""
    data = part.get("data") if isinstance(part, dict) else None
    if not isinstance(data, dict):
        return []
    head = {"id": ids.of(part.get("id")), "sessionID": ids.session_id, "messageID": message_id}
    if data.get("type") == "file":
        note = line.file_note(data.get("url"), data.get("filename"))
        if note is not None:
            return [{**head, "type": "text", "text": note}]
    notes: list[str] = []
    state = data.get("state")
    if data.get("type") == "tool" and isinstance(state, dict):
        attachments = state.get("attachments")
        if isinstance(attachments, list):
            kept = []
            for attachment in attachments:
                note = (
                    line.file_note(attachment.get("url"), attachment.get("filename"))
                    if isinstance(attachment, dict)
                    else None
                )
                if note is None:
                    kept.append(_attachment(attachment, message_id, ids))
                else:
                    notes.append(note)
            state["attachments"] = kept
    line.replace_cuts(data)
    made = [{**head, **data}]
    if notes:
        made.append(
            {**head, "id": ids.of(part.get("id")) + "n", "type": "text", "text": "\n".join(notes)}
        )
    return made


def _attachment(attachment: Any, message_id: str, ids: CopyIds) -> Any:
    """A kept attachment (a file part) with the copy's ids."""
    if not isinstance(attachment, dict):
        return attachment
    renamed = dict(attachment)
    if "id" in renamed:
        renamed["id"] = ids.of(renamed["id"])
    if "messageID" in renamed:
        renamed["messageID"] = message_id
    if "sessionID" in renamed:
        renamed["sessionID"] = ids.session_id
    return renamed


def _message(line: _Line, ids: CopyIds) -> dict[str, Any] | None:
    """A message of the copy from its probed line; None for a line that is no message."""
    entry = line.probed.entry
    payload = entry.get("payload")
    if not isinstance(payload, dict) or not isinstance(entry.get("uuid"), str):
        return None
    data = payload.get("message")
    parts = payload.get("parts")
    message_id = ids.of(entry["uuid"])
    info = {"id": message_id, "sessionID": ids.session_id}
    if isinstance(data, dict):
        line.replace_cuts(data)
        info.update(data)
        if "parentID" in info:
            info["parentID"] = ids.of(info["parentID"])
    made: list[dict[str, Any]] = []
    for part in parts if isinstance(parts, list) else ():
        made += _part(line, part, message_id, ids)
    return {"info": info, "parts": made}


def _pieces(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), OUT_CHUNK):
        yield data[start : start + OUT_CHUNK]


def slim_opencode(
    fd: ByteSource,
    size: int,
    info: dict[str, Any],
    ids: CopyIds,
    max_line: int,
    stats: SlimStats,
) -> Iterator[bytes]:
    """The copy of one session's view of `size` bytes (module docstring), in pieces."""
    stats.bytes_read = size
    head = b'{"info":' + dumps_json(info) + b',"messages":['
    stats.bytes_written += len(head)
    yield head
    written = 0
    for raw in lines(fd, 0, size, max_line, changed=FileShrankError):
        probed = LineSource(raw).probe_sized()
        if not isinstance(probed, ProbedLine):
            stats.omitted_tail_bytes += raw.size if probed is not None else 0
            continue
        message = _message(_Line(raw, probed, ids, stats), ids)
        if message is None:
            continue
        data = (b"," if written else b"") + dumps_json(message)
        written += 1
        stats.lines += 1
        stats.bytes_written += len(data)
        yield from _pieces(data)
    stats.bytes_written += 3
    yield b"]}\n"


def opencode_copy(
    root: TranscriptSource,
    principal: Principal | None,
    files: list[TranscriptFile],
    opened: Iterator[tuple[TranscriptFile, ByteSource]],
    options: SlimOptions,
    max_line: int,
) -> Iterator[SlimEvent]:
    """The slim copy of an opencode session (and its sub-sessions): one export file each.

    Its session id is the original's with the copy's tag (`copy_tag` of the
    session and the fork asked for); a sub-session's copy is that session's
    id with the same tag, its `parentID` the copy of its parent. Downscale
    and keep_last keep images in Claude Code's blocks, which an opencode copy
    does not hold: asked for, they are INVALID_ARGUMENT.
    """
    if options.downscale or options.keep_last:
        raise InvalidArgumentError("an opencode session's copy replaces every image by text")
    if not isinstance(root, SessionInfos):
        raise SessionNotFoundError()
    top = files[0]
    tag = copy_tag(top.session_id, options.fork_session_id)
    copy_id = top.session_id + tag
    in_copy = {transcript.session_id for transcript in files}
    yield SlimStart(top.session_id, top.project_dir, copy_id, OPENCODE)
    for transcript, fd in opened:
        info = root.session_info(transcript)
        if info is None:
            if transcript is top:
                raise SessionNotFoundError()
            continue
        ids = CopyIds(tag, transcript.session_id + tag, root.name_of(transcript, principal))
        info["id"] = ids.session_id
        if info.get("parentID") in in_copy:
            info["parentID"] = ids.of(info["parentID"])
        relative = (
            f"{copy_id}.json" if transcript is top else f"{copy_id}/subagents/{ids.session_id}.json"
        )
        size = file_size(fd)
        yield SlimFileStart(transcript.session_id, relative, transcript.is_subagent, size)
        stats = SlimStats()
        yield from slim_opencode(fd, size, info, ids, max_line, stats)
        yield stats
