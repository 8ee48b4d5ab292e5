"""Transcript sources: the one seam through which a session id becomes bytes to read.

A `TranscriptSource` lists the transcripts a caller may see, resolves a session
id to one, opens it for reading and names it: `key_of` is its stable name in
the state store's indexes, `stat` its size and times, `version` which bytes an
open transcript holds (scrollback.linefile.FileVersion). The services take
this protocol and never a concrete source. Two implement it: a directory root
(scrollback.directory) and a bucket root (scrollback.bucket); which one a
location names is decided once, when the setting is parsed
(`scrollback.objects.transcripts_location`). Both name their transcripts by
the layouts of scrollback.layouts and share the index and the id rules
written here (`Catalog`); a source of another kind (a database of sessions)
brings its own listing and `open`, and keeps the rest.

Every transcript handed out is jailed to its own project (docs/contract.md
§11): one outside it does not exist, is not listed, not found, and never
counted when deciding whether a session id is ambiguous. A session id shared
by two visible transcripts of one source is ambiguous and refused rather than
guessed. Errors never carry a path.

Visibility is enforced here too, so no RPC can forget it: `list` and
`resolve` take the caller's `Principal` (None: no auth, everything visible)
and only see the projects it may read; a session in another project is not
found, the same answer as one that does not exist, by the same code path at
the same cost.

Sources never shadow one another: `codex:<id>` names a rollout only, and a
bare id resolves in the first source (Claude Code, then Codex) where the
caller sees a transcript of that id; `name_of` gives the id a caller lists a
transcript by (`codex:<id>` when the bare id is a visible Claude Code session's).

The index is an immutable snapshot that requests read without a lock, and a
miss never rebuilds it. `list` and hits refresh it when it is older than
`rescan_interval`; a miss (nothing visible, or a listed transcript gone)
refreshes at once, so a session written a moment ago is found, but concurrent
misses share one refresh. How a refresh finds what changed is the source's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from scrollback.contract.refs import SESSION_SOURCES, SOURCE_SEPARATOR, split_session_id
from scrollback.layouts import CLAUDE_CODE
from scrollback.linefile import ByteSource, FileVersion, SourceStat
from scrollback.principals import Principal

log = logging.getLogger(__name__)
T = TypeVar("T")

# How many skipped file names the log line shows.
_SKIPPED_SHOWN = 3

# (size, mtime_ns, ctime_ns) of an open transcript that had settled when it was looked at.
Stamp = tuple[int, int, int]
# How long a file must have been left unchanged before its stamp is trusted: far
# above the coarse clock file times are taken from (a tick is at most 10 ms).
SETTLED_SECONDS = 2.0


def stamp_of(stat: SourceStat, now_ns: int | None = None) -> Stamp | None:
    """The file's stamp if its last change is SETTLED_SECONDS old, else None.

    What was checked of a file while it carried a stamp still holds while its
    stamp is the same: any write since would have moved its change time
    (which no caller can set back) past the stamped one, and a file that has
    not settled gets no stamp, since two writes within one clock tick can
    leave the same times. Take it before reading the bytes it will vouch for:
    a write in between changes it, so those bytes are checked again next time.
    Growing files (a session being written) change stamp at every append.
    """
    now = time.time_ns() if now_ns is None else now_ns
    if now - stat.st_ctime_ns < SETTLED_SECONDS * 1e9:
        return None
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class SessionNotFoundError(LookupError):
    """No transcript has that session id (or it lies outside its project dir)."""

    def __init__(self) -> None:
        super().__init__("session not found")


class AmbiguousSessionError(LookupError):
    """Two or more transcripts under the root share that session id."""

    def __init__(self) -> None:
        super().__init__("session id is shared by more than one transcript")


@dataclass(frozen=True, slots=True)
class TranscriptFile:
    """One transcript of a source.

    `location` is where its source keeps it, in that source's terms (a file's
    path under a directory root, an object's key in a bucket); only its source
    reads it.
    """

    session_id: str
    project_dir: str
    location: str
    is_subagent: bool
    parent_session_id: str
    source: str = CLAUDE_CODE
    # The title its source keeps (a database's sessions have one); "": read from its lines.
    title: str = ""

    @property
    def unique_id(self) -> str:
        """The id that names this session alone among all sources, for every caller.

        Its session id in the first source (Claude Code), `<source>:<id>` in any
        other: the key of what is kept per session (search rows, insight).
        """
        if self.source == SESSION_SOURCES[0]:
            return self.session_id
        return self.source + SOURCE_SEPARATOR + self.session_id


class TranscriptSource(Protocol):
    """Where transcripts are kept: what the services read sessions through.

    `resolve` raises RefError, SessionNotFoundError or AmbiguousSessionError;
    `open` opens a resolved transcript as it is now (SessionNotFoundError if it
    is gone or left its jail); `open_listed` as the last listing saw it (what a
    listing shows: titles, insight, the indexer's pass), and `read_listed` runs
    `work` on it, closed after. `stat` raises OSError for a transcript gone.
    """

    @property
    def location(self) -> str:
        """Where the transcripts are, for log lines (no secret in it)."""
        ...

    def list(self, principal: Principal | None) -> list[TranscriptFile]: ...
    def resolve(self, session_id: str, principal: Principal | None) -> TranscriptFile: ...
    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str: ...
    def exists(self, transcript: TranscriptFile) -> bool: ...
    def stat(self, transcript: TranscriptFile) -> SourceStat: ...
    def key_of(self, transcript: TranscriptFile) -> str: ...
    def open(self, transcript: TranscriptFile) -> ByteSource: ...
    def open_listed(self, transcript: TranscriptFile) -> ByteSource: ...
    def read_listed(self, transcript: TranscriptFile, work: Callable[[ByteSource], T]) -> T: ...
    def version(self, opened: ByteSource, stat: SourceStat | None = None) -> FileVersion: ...


def visible_to(principal: Principal | None, project_dir: str) -> bool:
    """True if that principal may read the project dir (None: no auth, always)."""
    return principal is None or principal.sees_project(project_dir)


def log_skipped(skipped: tuple[str, ...]) -> None:
    """One line: how many `.jsonl` files are not listed because of their names, and a few."""
    if not skipped:
        log.info("every .jsonl file under the transcripts root has a valid session id now")
        return
    shown = ", ".join(skipped[:_SKIPPED_SHOWN]) + (", ..." if len(skipped) > _SKIPPED_SHOWN else "")
    log.warning(
        "skipping %d .jsonl file(s) under the transcripts root: a session id (the file name "
        "without .jsonl) must match [A-Za-z0-9_-]{1,64}; rename them to list them (%s)",
        len(skipped),
        shown,
    )


@dataclass(frozen=True, slots=True)
class RootSnapshot:
    """The index at one moment: read without a lock, replaced whole."""

    by_id: dict[str, tuple[TranscriptFile, ...]]
    files: tuple[TranscriptFile, ...]

    @classmethod
    def of(cls, files: Iterable[TranscriptFile]) -> RootSnapshot:
        """The snapshot of these transcripts, in their order."""
        listed = tuple(files)
        by_id: dict[str, list[TranscriptFile]] = {}
        for transcript in listed:
            by_id.setdefault(transcript.session_id, []).append(transcript)
        return cls({k: tuple(v) for k, v in by_id.items()}, listed)


EMPTY_ROOT = RootSnapshot({}, ())


class Catalog:
    """One source's index and the id rules over it: list, resolve, name_of.

    `rebuild` brings the index up to date (called under the catalog's lock)
    and returns the new snapshot, or None when nothing changed. `exists` and
    `jailed` are the source's checks of a listed transcript.
    """

    def __init__(
        self,
        rebuild: Callable[[], RootSnapshot | None],
        *,
        rescan_interval: float,
        exists: Callable[[TranscriptFile], bool],
        jailed: Callable[[TranscriptFile], bool],
    ) -> None:
        self._rebuild = rebuild
        self._exists = exists
        self._jailed = jailed
        self._rescan_interval = rescan_interval
        self._lock = threading.Lock()  # held by the one refresh in progress
        self.snapshot = EMPTY_ROOT
        self.refreshed_at = float("-inf")  # when the last refresh started

    def _refresh_locked(self) -> None:
        self.refreshed_at = time.monotonic()
        snapshot = self._rebuild()
        if snapshot is not None:
            self.snapshot = snapshot

    def refresh_if_older(self, max_age: float) -> RootSnapshot:
        """The snapshot, refreshed first if older than max_age (built on first use).

        A caller that finds a refresh in progress does not queue behind it: it
        answers from the current snapshot, so this never stalls anyone.
        """
        if self.refreshed_at == float("-inf"):
            return self.refresh_since(float("-inf"))  # the first index: wait for it
        if time.monotonic() - self.refreshed_at <= max_age:
            return self.snapshot
        if not self._lock.acquire(blocking=False):
            return self.snapshot
        try:
            if time.monotonic() - self.refreshed_at > max_age:
                self._refresh_locked()
        finally:
            self._lock.release()
        return self.snapshot

    def refresh_since(self, asked_at: float) -> RootSnapshot:
        """The snapshot of a refresh that began after `asked_at` (one refresh serves a crowd)."""
        with self._lock:
            if self.refreshed_at <= asked_at:
                self._refresh_locked()
            return self.snapshot

    def list(self, principal: Principal | None) -> list[TranscriptFile]:
        """The transcripts the principal may see (index up to rescan_interval old)."""
        snapshot = self.refresh_if_older(self._rescan_interval)
        return [t for t in snapshot.files if visible_to(principal, t.project_dir)]

    def resolve(self, session_id: str, principal: Principal | None) -> TranscriptFile:
        """The transcript of a session id; RefError, SessionNotFoundError or AmbiguousSessionError.

        `<source>:<id>` looks in that source only; a bare id in the first source
        (in SESSION_SOURCES order) where the principal sees a transcript of that
        id, so a session of one source never shadows nor blocks one of an earlier
        source, and two transcripts are ambiguous only within one source. A
        session the principal may not see takes the same path as one that does
        not exist: both are misses.
        """
        source, bare = split_session_id(session_id)
        asked_at = time.monotonic()
        snapshot = self.refresh_if_older(self._rescan_interval)
        candidates = _visible(snapshot, bare, source, principal)
        if not candidates or not all(self._exists(c) for c in candidates):
            candidates = _visible(self.refresh_since(asked_at), bare, source, principal)
        if not candidates:
            raise SessionNotFoundError()
        if len(candidates) > 1:
            raise AmbiguousSessionError()
        transcript = candidates[0]
        if not self._jailed(transcript):
            raise SessionNotFoundError()
        return transcript

    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str:
        """The id a principal names a listed transcript by: its bare session id when that
        resolves to its source for the principal, else `<source>:<id>` (see resolve)."""
        rank = SESSION_SOURCES.index(transcript.source)
        for other in self.snapshot.by_id.get(transcript.session_id, ()):
            if SESSION_SOURCES.index(other.source) < rank and visible_to(
                principal, other.project_dir
            ):
                return transcript.source + SOURCE_SEPARATOR + transcript.session_id
        return transcript.session_id


def _visible(
    snapshot: RootSnapshot, session_id: str, source: str, principal: Principal | None
) -> tuple[TranscriptFile, ...]:
    """The transcripts a session id names for that principal (see Catalog.resolve)."""
    seen = [t for t in snapshot.by_id.get(session_id, ()) if visible_to(principal, t.project_dir)]
    if not source:
        source = min((t.source for t in seen), key=SESSION_SOURCES.index, default="")
    return tuple(t for t in seen if t.source == source)


def read_closed(opened: ByteSource, work: Callable[[ByteSource], T]) -> T:
    """`work` on an opened transcript, closed after."""
    with opened as source:
        return work(source)
