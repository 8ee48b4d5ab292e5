"""Listing the sessions under the root: newest first, with titles, paged by keyset tokens.

Newest by the session's own last activity: the time of its last entry as the
insight index knows it (one query per listing, never after the file's
modification time), where the index covers the file as listed; else the
file's modification time.

The tree walk is TranscriptSource's (cached). A title is the one its source
keeps (opencode's session title), else the conversation's
summary, or else its first real user prompt, found in the head of the file
with bounded reads that skip long lines (image lines are never loaded); titles
are cached per file version.
"""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from history_service.errors import InvalidArgumentError
from history_service.insight_model import InsightStore
from history_service.lines import FileShrankError, RawLine, is_blank, iter_lines_forward
from history_service.tokens import TokenCodec
from scrollback.contract.stripping import MIN_INLINE_LIMIT, parse_json_object, strip_line_streamed
from scrollback.gemini_live import LiveView
from scrollback.layouts import CLAUDE_CODE
from scrollback.linefile import ByteSource, LineFile, SourceStat
from scrollback.principals import Principal
from scrollback.state.errors import StoreBusyError
from scrollback.transcripts import TranscriptFile, TranscriptSource

TITLE_CHARS = 200
TITLE_HEAD_BYTES = 512 * 1024
TITLE_MAX_LINE = 64 * 1024
# A line that carries payloads (a prompt with a pasted image) is read streaming, its payloads
# cut, while no prompt is known yet; such lines do not count against the head, up to this many
# bytes of them in all.
TITLE_PAYLOAD_BYTES = 256 * 1024 * 1024
# Titles of one page read at once (each a GET when the transcripts are in a bucket).
TITLE_READS = 8
DEFAULT_LIST_SIZE = 100
MAX_LIST_SIZE = 1000
_NOT_A_PROMPT_PREFIXES = ("<command-", "<local-command-", "Caveat:", "[Request interrupted")
# What stands for an image in a prompt's text rather than saying anything: Claude Code's
# "[Image #1]" (and "[Image: source: ...]"), Codex's `<image name=[Image #1]>` wrapper, and
# the text a slim copy puts where an image was.
_IMAGE_PLACEHOLDER = re.compile(
    r"\[Image(?: #\d+|: [^\]\n]{0,400})\]"
    r"|</?image(?: name=\[Image #\d+\])?>"
    r"|\[(?:image|document) cut by scrollback slim:[^\]\n]{0,800}\]"
)


# Notes Claude Code puts in a prompt (the file open in the IDE, a reminder): not what was asked.
_NOTE_BLOCK = re.compile(
    r"<(ide_opened_file|ide_selection|ide_diagnostics|system-reminder)>[\s\S]*?(?:</\1>|$)"
)


# A slim copy's text where an image was names the original's ref: "ref <session>/<entry>/<i>".
_SLIM_REF = re.compile(
    rb"cut by scrollback slim: [^\]\n]{0,800}?ref ((?:[a-z-]{1,16}:)?[A-Za-z0-9_-]{1,64})/"
)


class HeadFacts(NamedTuple):
    """What the head of a transcript says: its title, and the session a slim copy names."""

    title: str
    slim_of: str = ""


def without_placeholders(text: str) -> str:
    """A prompt's text without the placeholders that stand for its images and without the
    notes Claude Code adds to it."""
    return _IMAGE_PLACEHOLDER.sub(" ", _NOTE_BLOCK.sub(" ", text))


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One transcript as listed."""

    session_id: str
    project_dir: str
    size_bytes: int
    modified_ns: int
    title: str
    is_subagent: bool
    parent_session_id: str
    source: str = CLAUDE_CODE
    # The session this one is a slim copy of (a fork by `scrollback slim --fork`), or "".
    slim_copy_of: str = ""
    # Its last activity (ns since the epoch): its last entry's time, or 0 for the file's mtime.
    activity_ns: int = 0

    @property
    def last_activity_ns(self) -> int:
        """When the session was last active: its last entry's time, else the file's mtime."""
        return self.activity_ns or self.modified_ns

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Most recently active first, then by project and id (the keyset of the page token)."""
        return (-self.last_activity_ns, self.project_dir, self.session_id)


def _rollout_prompt_text(entry: dict[str, object]) -> str:
    """A Codex rollout's user prompt: the text of its `event_msg` `user_message`."""
    payload = entry.get("payload")
    if entry.get("type") != "event_msg" or not isinstance(payload, dict):
        return ""
    if payload.get("type") != "user_message":
        return ""
    text = payload.get("message")
    return without_placeholders(text).strip() if isinstance(text, str) else ""


def _prompt_text(entry: dict[str, object]) -> str:
    if "payload" in entry and "message" not in entry:
        return _rollout_prompt_text(entry)
    if entry.get("type") != "user" or entry.get("isMeta") is True:
        return ""
    message = entry.get("message")
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    texts.append(text)
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                return ""
    for text in texts:
        text = without_placeholders(text).strip()
        if text and not text.startswith(_NOT_A_PROMPT_PREFIXES):
            return text
    return ""


def _head_entry(fd: ByteSource, raw: RawLine, *, long_lines: bool) -> dict[str, Any] | None:
    """A head line parsed; one too long to hold (a prompt with a pasted image) is read
    streaming with its payloads cut when `long_lines`, else skipped."""
    if raw.data is not None and raw.size <= TITLE_MAX_LINE:
        return parse_json_object(raw.data)
    if not long_lines or not raw.terminated:
        return None
    try:
        stripped = strip_line_streamed(
            LineFile(fd).line_reader(raw.start, raw.size, FileShrankError),
            raw.size,
            MIN_INLINE_LIMIT,
            TITLE_MAX_LINE,
        )
    except FileShrankError:
        return None
    if stripped is None or stripped.oversize:
        return None
    return parse_json_object(stripped.json)


def _activity_ns(indexed: tuple[int, int] | None, stat: SourceStat) -> int:
    """A session's last entry's time in ns when the index covers the file as listed (indexed to
    its very size), else 0: a file that grew since holds later entries, its mtime says when,
    and one of another size was rewritten.

    Never after the file's mtime (no entry is written after its file was): so a session the
    index reaches only ever moves down the list, never past a page token from below it.
    """
    if indexed is None or indexed[0] != stat.st_size:
        return 0
    return min(indexed[1] * 1000, stat.st_mtime_ns)


def _title_key(name: str, stat: SourceStat) -> tuple[str, int, int, int, str]:
    """What a title is kept under: the file's version as its stat names it (an object's
    stat carries its ETag, or its size and time from a store without ETags)."""
    pin: str = getattr(stat, "pin", "")
    return (name, stat.st_ino, stat.st_size, stat.st_mtime_ns, pin)


def _slim_ref_in(fd: ByteSource, start: int, end: int) -> str:
    """The session the first slim stand-in in [start, end) of the file names, or ""."""
    found = _SLIM_REF.search(fd.read(max(0, end - start), start)) if end > start else None
    return found.group(1).decode("ascii") if found else ""


def read_title(fd: ByteSource, size: int) -> str:
    """The summary, else the first real user prompt (its text: image placeholders left out),
    in the file's head; cut to 200 characters."""
    return read_head(fd, size).title


def read_head(fd: ByteSource, size: int) -> HeadFacts:
    """The title (`read_title`) and the session the first slim stand-in of the head names.
    Lines too long to hold (images) are read, their payloads cut, only while no prompt is
    known, and do not count against the head. A Gemini session's title is what its scan
    found (its `summary` metadata, else its first user text), wherever in the file it is."""
    if isinstance(fd, LiveView):
        return HeadFacts(" ".join(fd.scan.title.split())[:TITLE_CHARS])
    prompt = summary = slim_of = ""
    head = 0  # bytes of the head's lines that are not too long to hold
    for raw in iter_lines_forward(
        fd, 0, min(size, TITLE_HEAD_BYTES + TITLE_PAYLOAD_BYTES), TITLE_MAX_LINE
    ):
        long_line = raw.data is None or raw.size > TITLE_MAX_LINE
        if not long_line:
            head += raw.size + 1
        if head > TITLE_HEAD_BYTES or (long_line and prompt):
            break
        if is_blank(raw):
            continue
        if (
            not slim_of
            and raw.data is not None
            and b"by scrollback slim" in raw.data
            and (found := _SLIM_REF.search(raw.data))
        ):
            slim_of = found.group(1).decode("ascii")
        entry = _head_entry(fd, raw, long_lines=not prompt)
        if entry is None:
            continue
        if entry.get("type") == "summary":
            text = entry.get("summary")
            if isinstance(text, str) and text.strip():
                summary = text.strip()[:TITLE_CHARS]
                # The title is known: the rest of the head is only searched for a slim ref.
                slim_of = slim_of or _slim_ref_in(fd, raw.end + 1, min(size, TITLE_HEAD_BYTES))
                break
        if not prompt:
            prompt = _prompt_text(entry)
    return HeadFacts(summary or " ".join(prompt.split())[:TITLE_CHARS], slim_of)


class SessionLister:
    """Lists the sessions of one root."""

    def __init__(
        self, root: TranscriptSource, codec: TokenCodec, insight: InsightStore | None = None
    ) -> None:
        self._root = root
        self._codec = codec
        self._insight = insight
        self._titles: dict[tuple[str, int, int, int, str], HeadFacts] = {}
        self._lock = threading.Lock()

    async def page(
        self, principal: Principal | None, page_size: int, page_token: str, project_dir: str
    ) -> tuple[list[SessionInfo], str]:
        """One page of the sessions `principal` may see, and the next token (empty at the end)."""
        if page_size < 0:
            raise InvalidArgumentError("page_size must not be negative")
        size = DEFAULT_LIST_SIZE if page_size == 0 else min(page_size, MAX_LIST_SIZE)
        after = None
        if page_token:
            activity_ns, project, session = self._codec.parse_list_token(page_token)
            after = (-activity_ns, project, session)
        return await asyncio.to_thread(self._list, principal, size, after, project_dir)

    def _list(
        self,
        principal: Principal | None,
        size: int,
        after: tuple[int, str, str] | None,
        project_dir: str,
    ) -> tuple[list[SessionInfo], str]:
        infos: list[tuple[SessionInfo, TranscriptFile, SourceStat]] = []
        activity = self._last_activity(project_dir)
        for transcript in self._root.list(principal):
            if project_dir and transcript.project_dir != project_dir:
                continue
            try:
                stat = self._root.stat(transcript)
            except OSError:
                continue
            infos.append(
                (
                    SessionInfo(
                        self._root.name_of(transcript, principal),
                        transcript.project_dir,
                        stat.st_size,
                        stat.st_mtime_ns,
                        "",
                        transcript.is_subagent,
                        transcript.parent_session_id,
                        transcript.source,
                        activity_ns=_activity_ns(
                            activity.get((transcript.project_dir, transcript.unique_id)), stat
                        ),
                    ),
                    transcript,
                    stat,
                )
            )
        infos.sort(key=lambda listed: listed[0].sort_key)
        if after is not None:
            infos = [listed for listed in infos if listed[0].sort_key > after]
        page = infos[:size]
        titled = self._titled(page)
        token = ""
        if len(infos) > size:
            last = page[-1][0]
            token = self._codec.list_token(
                (last.last_activity_ns, last.project_dir, last.session_id)
            )
        return titled, token

    def _last_activity(self, project_dir: str) -> dict[tuple[str, str], tuple[int, int]]:
        """What the insight index knows of the sessions' last entries; nothing when it cannot
        answer (the listing never fails for the index: those sessions sort by mtime)."""
        if self._insight is None:
            return {}
        try:
            return self._insight.last_activity(project_dir)
        except (LookupError, OSError, StoreBusyError):
            return {}

    def _titled(
        self, page: list[tuple[SessionInfo, TranscriptFile, SourceStat]]
    ) -> list[SessionInfo]:
        """The page's infos with their titles; those not known are read a few at once, so a
        bucket's GETs overlap (bounded per call, never shared with another caller's page)."""
        with self._lock:
            unknown = sum(
                _title_key(info.project_dir + "/" + transcript.unique_id, stat) not in self._titles
                for info, transcript, stat in page
            )
        if unknown < 2:
            return [self._with_title(*listed) for listed in page]
        with ThreadPoolExecutor(min(TITLE_READS, unknown), thread_name_prefix="titles") as pool:
            return list(pool.map(lambda listed: self._with_title(*listed), page))

    def info_of(self, transcript: TranscriptFile, principal: Principal | None) -> SessionInfo:
        """One transcript as that principal lists it, with its title (blocking); OSError if gone."""
        stat = self._root.stat(transcript)
        info = SessionInfo(
            self._root.name_of(transcript, principal),
            transcript.project_dir,
            stat.st_size,
            stat.st_mtime_ns,
            "",
            transcript.is_subagent,
            transcript.parent_session_id,
            transcript.source,
        )
        return self._with_title(info, transcript, stat)

    def _title(self, name: str, source: ByteSource) -> HeadFacts:
        """The title of an open transcript, known or read (then kept) under its stat."""
        stat = source.stat()
        key = _title_key(name, stat)
        with self._lock:
            title = self._titles.get(key)
        if title is None:
            title = read_head(source, stat.st_size)
            with self._lock:
                if len(self._titles) > 10_000:
                    self._titles.clear()
                self._titles[key] = title
        return title

    def _with_title(
        self, info: SessionInfo, transcript: TranscriptFile, listed: SourceStat
    ) -> SessionInfo:
        """The info with its title: known for the file as listed, else read from it.

        A title is kept per file version as listed: (inode, size, mtime), and an
        object's ETag; known, it needs no read at all. Else it is read from the
        version listed (for a bucket, no HEAD: its listing gave size and ETag),
        or from the one there now if that was replaced meanwhile, and kept
        under what that version's stat says.
        """
        name = info.project_dir + "/" + transcript.unique_id
        with self._lock:
            # A source that keeps titles itself (a database of sessions) names no slim original.
            title = (
                HeadFacts(transcript.title)
                if transcript.title
                else self._titles.get(_title_key(name, listed))
            )
        if title is None:
            try:
                title = self._root.read_listed(transcript, lambda source: self._title(name, source))
            except (LookupError, OSError):
                return info
        # A slim copy made in place keeps its own id: only another session's is an original
        # (a ref may name it with its source's prefix, "codex:<id>").
        own = info.session_id.rpartition(":")[2]
        slim_of = title.slim_of if title.slim_of.rpartition(":")[2] not in ("", own) else ""
        return SessionInfo(
            info.session_id,
            info.project_dir,
            info.size_bytes,
            info.modified_ns,
            title.title,
            info.is_subagent,
            info.parent_session_id,
            info.source,
            slim_of,
            info.activity_ns,
        )
