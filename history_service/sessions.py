"""Listing the sessions under the root: newest first, with titles, paged by keyset tokens.

The tree walk is TranscriptSource's (cached). A title is the conversation's
summary, or else its first real user prompt, found in the head of the file
with bounded reads that skip long lines (image lines are never loaded); titles
are cached per file version.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from history_service.errors import InvalidArgumentError
from history_service.lines import FileShrankError, RawLine, is_blank, iter_lines_forward
from history_service.tokens import TokenCodec
from scrollback.contract.stripping import MIN_INLINE_LIMIT, parse_json_object, strip_line_streamed
from scrollback.gemini_live import LiveView
from scrollback.layouts import CLAUDE_CODE
from scrollback.linefile import ByteSource, LineFile, SourceStat
from scrollback.principals import Principal
from scrollback.transcripts import TranscriptFile, TranscriptSource

TITLE_CHARS = 200
TITLE_HEAD_BYTES = 512 * 1024
TITLE_MAX_LINE = 64 * 1024
# Titles of one page read at once (each a GET when the transcripts are in a bucket).
TITLE_READS = 8
DEFAULT_LIST_SIZE = 100
MAX_LIST_SIZE = 1000
_NOT_A_PROMPT_PREFIXES = ("<command-", "<local-command-", "Caveat:", "[Request interrupted")


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

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Newest first, then by project and id (the keyset of the page token)."""
        return (-self.modified_ns, self.project_dir, self.session_id)


def _rollout_prompt_text(entry: dict[str, object]) -> str:
    """A Codex rollout's user prompt: the text of its `event_msg` `user_message`."""
    payload = entry.get("payload")
    if entry.get("type") != "event_msg" or not isinstance(payload, dict):
        return ""
    if payload.get("type") != "user_message":
        return ""
    text = payload.get("message")
    return text.strip() if isinstance(text, str) else ""


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
        text = text.strip()
        if text and not text.startswith(_NOT_A_PROMPT_PREFIXES):
            return text
    return ""


def _head_entry(fd: ByteSource, raw: RawLine) -> dict[str, Any] | None:
    """A head line parsed; one too long to hold (a prompt with a pasted image) is read
    streaming with its payloads cut, when it ends within the head (the title's read bound)."""
    if raw.data is not None and raw.size <= TITLE_MAX_LINE:
        return parse_json_object(raw.data)
    if raw.end > TITLE_HEAD_BYTES or not raw.terminated:
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


def _title_key(name: str, stat: SourceStat) -> tuple[str, int, int, int, str]:
    """What a title is kept under: the file's version as its stat names it (an object's
    stat carries its ETag, or its size and time from a store without ETags)."""
    pin: str = getattr(stat, "pin", "")
    return (name, stat.st_ino, stat.st_size, stat.st_mtime_ns, pin)


def read_title(fd: ByteSource, size: int) -> str:
    """The summary, else the first real user prompt, in the file's head; cut to 200 characters.

    A Gemini session's are what its scan found (its `summary` metadata, else its
    first user text), wherever in the file they are.
    """
    if isinstance(fd, LiveView):
        return " ".join(fd.scan.title.split())[:TITLE_CHARS]
    prompt = ""
    for raw in iter_lines_forward(fd, 0, min(size, TITLE_HEAD_BYTES), TITLE_MAX_LINE):
        if is_blank(raw):
            continue
        entry = _head_entry(fd, raw)
        if entry is None:
            continue
        if entry.get("type") == "summary":
            summary = entry.get("summary")
            if isinstance(summary, str) and summary.strip():
                return summary.strip()[:TITLE_CHARS]
        if not prompt:
            prompt = _prompt_text(entry)
    return " ".join(prompt.split())[:TITLE_CHARS]


class SessionLister:
    """Lists the sessions of one root."""

    def __init__(self, root: TranscriptSource, codec: TokenCodec) -> None:
        self._root = root
        self._codec = codec
        self._titles: dict[tuple[str, int, int, int, str], str] = {}
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
            modified_ns, project, session = self._codec.parse_list_token(page_token)
            after = (-modified_ns, project, session)
        return await asyncio.to_thread(self._list, principal, size, after, project_dir)

    def _list(
        self,
        principal: Principal | None,
        size: int,
        after: tuple[int, str, str] | None,
        project_dir: str,
    ) -> tuple[list[SessionInfo], str]:
        infos: list[tuple[SessionInfo, TranscriptFile, SourceStat]] = []
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
            token = self._codec.list_token((last.modified_ns, last.project_dir, last.session_id))
        return titled, token

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

    def _title(self, name: str, source: ByteSource) -> str:
        """The title of an open transcript, known or read (then kept) under its stat."""
        stat = source.stat()
        key = _title_key(name, stat)
        with self._lock:
            title = self._titles.get(key)
        if title is None:
            title = read_title(source, stat.st_size)
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
            title = self._titles.get(_title_key(name, listed))
        if title is None:
            try:
                title = self._root.read_listed(transcript, lambda source: self._title(name, source))
            except (LookupError, OSError):
                return info
        return SessionInfo(
            info.session_id,
            info.project_dir,
            info.size_bytes,
            info.modified_ns,
            title,
            info.is_subagent,
            info.parent_session_id,
            info.source,
        )
