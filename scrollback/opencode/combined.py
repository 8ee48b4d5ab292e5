"""Two or more TranscriptSources served as one: files (Claude Code, Codex) and a database.

Each member serves some of the contract's sources (scrollback.contract.refs
SESSION_SOURCES); the members are given in that order. The rules of
scrollback.transcripts hold across members as within one: `<source>:<id>`
looks in the member serving that source only; a bare id resolves in the
first member where the caller sees a session of that id, so a session never
shadows one of an earlier source; `name_of` gives `<source>:<id>` when an
earlier member's session has the same bare id for that caller. Everything
else about a transcript is its own member's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from scrollback.contract.refs import SOURCE_SEPARATOR, split_session_id
from scrollback.linefile import ByteSource, FileVersion, SourceStat
from scrollback.opencode.export import SessionInfos
from scrollback.opencode.naming import PartImages
from scrollback.opencode.view import SessionView
from scrollback.principals import Principal
from scrollback.transcripts import SessionNotFoundError, TranscriptFile, TranscriptSource

T = TypeVar("T")
# How long the ids an earlier member lists for a caller are reused by name_of.
_IDS_SECONDS = 1.0


class CombinedSource:
    """Members, each with the sources it serves, in the contract's order of sources."""

    def __init__(self, members: Sequence[tuple[frozenset[str], TranscriptSource]]) -> None:
        self._members = tuple(members)
        self._ids: dict[tuple[int, Principal | None], tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        """Every member's location, for log lines."""
        return " + ".join(member.location for _, member in self._members)

    def _member(self, source: str) -> TranscriptSource:
        for served, member in self._members:
            if source in served:
                return member
        raise SessionNotFoundError()

    def list(self, principal: Principal | None) -> list[TranscriptFile]:
        """Every member's transcripts the principal may see."""
        return [t for _, member in self._members for t in member.list(principal)]

    def resolve(self, session_id: str, principal: Principal | None) -> TranscriptFile:
        """The transcript of a session id: in the named source's member, else the first member
        that has it (RefError, SessionNotFoundError or AmbiguousSessionError)."""
        source, _ = split_session_id(session_id)
        if source:
            return self._member(source).resolve(session_id, principal)
        for _, member in self._members:
            try:
                return member.resolve(session_id, principal)
            except SessionNotFoundError:
                continue
        raise SessionNotFoundError()

    def _listed_ids(self, index: int, principal: Principal | None) -> frozenset[str]:
        """The bare ids member `index` lists for the principal (reused for a second)."""
        now = time.monotonic()
        with self._lock:
            kept = self._ids.get((index, principal))
        if kept is not None and now - kept[0] <= _IDS_SECONDS:
            return kept[1]
        ids = frozenset(t.session_id for t in self._members[index][1].list(principal))
        with self._lock:
            if len(self._ids) > 1024:
                self._ids.clear()
            self._ids[(index, principal)] = (now, ids)
        return ids

    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str:
        """The id a principal names a listed transcript by (scrollback.transcripts.Catalog)."""
        name = self._member(transcript.source).name_of(transcript, principal)
        if SOURCE_SEPARATOR in name:
            return name
        for index, (served, _) in enumerate(self._members):
            if transcript.source in served:
                break
            if transcript.session_id in self._listed_ids(index, principal):
                return transcript.source + SOURCE_SEPARATOR + transcript.session_id
        return name

    def exists(self, transcript: TranscriptFile) -> bool:
        """True if the transcript is still there."""
        return self._member(transcript.source).exists(transcript)

    def stat(self, transcript: TranscriptFile) -> SourceStat:
        """The transcript's size and times (OSError if gone)."""
        return self._member(transcript.source).stat(transcript)

    def key_of(self, transcript: TranscriptFile) -> str:
        """The transcript's stable name in the state store's indexes."""
        return self._member(transcript.source).key_of(transcript)

    def open(self, transcript: TranscriptFile) -> ByteSource:
        """The transcript opened as it is now."""
        return self._member(transcript.source).open(transcript)

    def open_listed(self, transcript: TranscriptFile) -> ByteSource:
        """The transcript as the last listing saw it."""
        return self._member(transcript.source).open_listed(transcript)

    def read_listed(self, transcript: TranscriptFile, work: Callable[[ByteSource], T]) -> T:
        """`work` on the transcript as listed, closed after."""
        return self._member(transcript.source).read_listed(transcript, work)

    def entry_of_part(
        self, transcript: TranscriptFile, part_id: str, index: int
    ) -> tuple[str, int] | None:
        """What a ref naming a part names in its message's line (scrollback.opencode.naming),
        for a member whose refs name parts; else None."""
        member = self._member(transcript.source)
        if isinstance(member, PartImages):
            return member.entry_of_part(transcript, part_id, index)
        return None

    def session_info(self, transcript: TranscriptFile) -> dict[str, Any] | None:
        """The session's info in opencode's export format, for a member that keeps one."""
        member = self._member(transcript.source)
        if isinstance(member, SessionInfos):
            return member.session_info(transcript)
        return None

    def version(self, opened: ByteSource, stat: SourceStat | None = None) -> FileVersion:
        """Which bytes an open transcript holds, as its member names it."""
        if isinstance(opened, SessionView):
            return FileVersion.of(opened, stat)
        return self._members[0][1].version(opened, stat)
