"""Finding transcripts under the root: the one place that turns a session id into a path.

Layout (docs/contract.md §1): `<root>/<project-dir>/<sessionId>.jsonl`; sub-agents
at `<root>/<project-dir>/<sessionId>/subagents/agent-<id>.jsonl` or (legacy)
`<root>/<project-dir>/agent-<id>.jsonl`. `*.meta.json` sidecars are not
transcripts. The session id is the file name without `.jsonl`; file names that
are not valid ids are ignored, and a root made with `report_skipped` logs how
many and a few of their names, at its first listing and whenever they change.

Every path handed out is jailed to its own project directory (docs/contract.md
§11): a project dir is a real directory directly under the root (a
symlinked project dir is not one), and a transcript's real path (symlinks
resolved) lies under its project dir's real path, or the transcript does not
exist: it is not listed, not found, and never counted when deciding whether a
session id is ambiguous. A session id shared by two visible transcripts of
one source is ambiguous and refused rather than guessed. Errors never carry a path.

Visibility is enforced here too, so no RPC can forget it: `list` and
`resolve` take the caller's `Principal` (None: no auth, everything visible)
and only see the project dirs it may read; a session in another project is
not found, the same answer as one that does not exist, by the same code path
at the same cost.

A second root, Codex CLI's sessions dir (docs/contract.md §1), is listed beside
it when configured: `<codex>/YYYY/MM/DD/rollout-<timestamp>-<uuid>.jsonl` and
the sibling `archived_sessions/rollout-...jsonl`. Its session id is the uuid
at the end of the file name (else the file name, when it is an id), its
project the `cwd` of the rollout's first line (`session_meta`), read once per
file (a rollout without one is listed with the project ""). That cwd is
trusted: whoever may write the Codex dir may place a session in any project.
A rollout is jailed to the dir it was listed from; symlinked dirs are not walked.
Each `TranscriptFile` carries its `source` (`claude-code` or `codex`).

Sources never shadow one another: `codex:<id>` names a rollout only, and a
bare id resolves in the first source (Claude Code, then Codex) where the
caller sees a transcript of that id; `name_of` gives the id a caller lists a
transcript by (`codex:<id>` when the bare id is a visible Claude Code session's).

The index of the root is an immutable snapshot that requests read without a
lock, and a miss never rebuilds it. Refreshing it is incremental: stat the
directories it came from (root, project dirs, session and `subagents` dirs)
and list again only those whose mtime changed, so a refresh of an unchanged
tree lists nothing, whoever asks for it and however often. `list` and hits
refresh when the index is older than `rescan_interval`; a miss (nothing
visible, or a listed file gone) refreshes at once, so a session written a
moment ago is found, but concurrent misses share one refresh.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import orjson

from scrollback.contract.refs import (
    ID_PATTERN,
    SESSION_SOURCES,
    SOURCE_SEPARATOR,
    split_session_id,
)
from scrollback.linefile import ByteSource, LineFile, LocalSource, SourceStat
from scrollback.principals import Principal

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSCRIPT_SUFFIX = ".jsonl"
# The sources' names, as the contract orders them (scrollback.contract.refs).
CLAUDE_CODE, CODEX = SESSION_SOURCES
# Codex's archive: a sibling of its sessions dir.
CODEX_ARCHIVE_DIR = "archived_sessions"
# A rollout's first line (session_meta, its instructions included) is read up to this long.
SESSION_META_MAX = 1024 * 1024
# The first read of a rollout's first line (most are a few KiB), growing fourfold after.
_META_FIRST_READ = 64 * 1024
_ROLLOUT_UUID = re.compile(
    r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl"
)
# How deep the dated tree of Codex's sessions dir is walked (YYYY/MM/DD).
_CODEX_DEPTH = 3
# How many skipped file names the log line shows.
_SKIPPED_SHOWN = 3
SUBAGENT_DIR = "subagents"
# A directory whose mtime is this close to the time we listed it may change
# again within the same coarse clock tick (kernels without fine-grained
# timestamps), leaving its mtime as it was: it is listed again at the next
# refresh, until it has been quiet for this long.
_UNSTABLE_NS = 20_000_000


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
    """One transcript file under the root."""

    session_id: str
    project_dir: str
    path: Path
    is_subagent: bool
    parent_session_id: str
    source: str = CLAUDE_CODE

    @property
    def unique_id(self) -> str:
        """The id that names this session alone among all sources, for every caller.

        Its session id in the first source (Claude Code), `<source>:<id>` in any
        other: the key of what is kept per session (search rows, insight).
        """
        if self.source == SESSION_SOURCES[0]:
            return self.session_id
        return self.source + SOURCE_SEPARATOR + self.session_id


def visible_to(principal: Principal | None, project_dir: str) -> bool:
    """True if that principal may read the project dir (None: no auth, always)."""
    return principal is None or principal.sees_project(project_dir)


def session_id_of(name: str) -> str | None:
    """The session id a transcript file name names, or None (not `.jsonl`, or not an id)."""
    if not name.endswith(TRANSCRIPT_SUFFIX):
        return None
    stem = name[: -len(TRANSCRIPT_SUFFIX)]
    return stem if ID_PATTERN.fullmatch(stem) else None


def rollout_session_id(name: str) -> str | None:
    """A rollout's session id: the uuid ending its file name, else the name if it is an id."""
    match = _ROLLOUT_UUID.search(name)
    if match is not None and match.end() == len(name):
        return match.group(1).lower()
    return session_id_of(name)


def _cwd_of(line: bytes) -> str:
    """The `cwd` of a `session_meta` line, else ""."""
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(entry, dict) or entry.get("type") != "session_meta":
        return ""
    payload = entry.get("payload")
    cwd = payload.get("cwd") if isinstance(payload, dict) else None
    return cwd if isinstance(cwd, str) else ""


def read_session_meta(fd: ByteSource) -> tuple[str, bool]:
    """The `cwd` of a rollout's first line when it is `session_meta` (else ""), and whether
    that answer is final while the file only grows.

    It is final once the first line ended (its newline is there), parsed whole, or ran
    past SESSION_META_MAX (no project, for good: the line is never read whole); a first
    line still being written is not, and is read again only when the file has grown.
    """
    line, ended = LineFile(fd).line_head(0, SESSION_META_MAX, _META_FIRST_READ)
    if line is None:
        return "", True
    if ended:
        return _cwd_of(line), True
    cwd = _cwd_of(line) if line else ""
    return cwd, bool(cwd)


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_link(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return True  # unknown: resolve it to be sure


def _under(real: str, directory_real: str) -> bool:
    return real.startswith(directory_real + os.sep)


def _mtime(path: str, now_ns: int) -> int | None:
    """A directory's mtime, or None if missing or too recent to trust (see _UNSTABLE_NS)."""
    try:
        mtime_ns = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return None if now_ns - mtime_ns < _UNSTABLE_NS else mtime_ns


# The mtime of a dir that is not there, so that one still missing is unchanged.
_ABSENT = -1


def _dir_state(path: str, now_ns: int) -> int | None:
    """As _mtime, but _ABSENT for a dir that does not exist (rather than None: list again)."""
    try:
        mtime_ns = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return _ABSENT
    except OSError:
        return None
    return None if now_ns - mtime_ns < _UNSTABLE_NS else mtime_ns


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


@dataclass(slots=True)
class _Project:
    """One project dir's transcripts and the mtimes of the directories they came from."""

    files: list[TranscriptFile] = field(default_factory=list)
    mtimes: dict[str, int | None] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # `.jsonl` files whose names are not ids


@dataclass(frozen=True, slots=True)
class RootSnapshot:
    """The index at one moment: read without a lock, replaced whole."""

    by_id: dict[str, tuple[TranscriptFile, ...]]
    files: tuple[TranscriptFile, ...]


EMPTY_ROOT = RootSnapshot({}, ())


@dataclass(frozen=True, slots=True)
class _Meta:
    """What a rollout's first line said: its cwd, and the size it was read at if not final."""

    cwd: str
    pending_size: int | None  # None: the answer is final (see read_session_meta)


class _CodexTree:
    """The rollouts of Codex's sessions dir and its archive, with the dirs' mtimes.

    Listed again whole when any dir it came from changed. The project (cwd) of
    each file is read once per file (path, device, inode) and kept, "no project"
    included; only a file whose first line is still being written is read again,
    and only once it has grown, so a refresh of unchanged dirs reads no file.
    """

    def __init__(self, sessions: Path) -> None:
        self.dirs = (sessions, sessions.parent / CODEX_ARCHIVE_DIR)
        self.files: list[TranscriptFile] = []
        self.mtimes: dict[str, int | None] = {}
        self.projects: dict[tuple[str, int, int], _Meta] = {}  # (path, dev, ino) -> first line
        self.pending: set[str] = set()  # paths whose first line is still being written
        self.scans = 0

    def changed(self, now_ns: int) -> bool:
        """True if a dir it came from changed (it is to be scanned again)."""
        if not self.mtimes:
            return True
        return any(
            old is None or _dir_state(path, now_ns) != old for path, old in self.mtimes.items()
        )

    def found_projects(self) -> bool:
        """Read again the first lines still being written; True if a file has a project now."""
        if not self.pending:
            return False
        found = False
        for k, transcript in enumerate(self.files):
            if str(transcript.path) in self.pending:
                project = self._project(str(transcript.path))
                if project:
                    self.files[k] = dataclasses.replace(transcript, project_dir=project)
                    found = True
        return found

    def scan(self, now_ns: int) -> None:
        self.scans += 1
        self.mtimes = {}
        known, self.projects, self.pending = self.projects, {}, set()
        files: list[TranscriptFile] = []
        for depth, base in zip((_CODEX_DEPTH, 0), self.dirs, strict=True):
            self._walk(str(base), os.path.realpath(base), depth, files, now_ns, known)
        self.files = files

    def _walk(
        self,
        path: str,
        base_real: str,
        depth: int,
        files: list[TranscriptFile],
        now_ns: int,
        known: dict[tuple[str, int, int], _Meta],
    ) -> None:
        self.mtimes[path] = _dir_state(path, now_ns)  # before listing: see _UNSTABLE_NS
        try:
            with os.scandir(path) as listing:
                entries = list(listing)
        except OSError:
            return
        for entry in entries:
            if depth > 0 and _is_real_dir(entry):
                self._walk(entry.path, base_real, depth - 1, files, now_ns, known)
                continue
            session_id = rollout_session_id(entry.name)
            if session_id is None or not _is_file(entry):
                continue
            if _is_link(entry) and not _under(os.path.realpath(entry.path), base_real):
                continue
            files.append(
                TranscriptFile(
                    session_id=session_id,
                    project_dir=self._project(entry.path, known),
                    path=Path(entry.path),
                    is_subagent=False,
                    parent_session_id="",
                    source=CODEX,
                )
            )

    def _project(self, path: str, known: dict[tuple[str, int, int], _Meta] | None = None) -> str:
        """The rollout's cwd ("" for none), read once per file (path, device, inode)."""
        try:
            stat = os.stat(path)
            key = (path, stat.st_dev, stat.st_ino)
            meta = (self.projects if known is None else known).get(key)
            if meta is None or meta.pending_size not in (None, stat.st_size):
                with LocalSource(os.open(path, os.O_RDONLY | os.O_CLOEXEC)) as source:
                    size = source.stat().st_size  # before the read: a later write reads again
                    cwd, final = read_session_meta(source)
                meta = _Meta(cwd, None if final else size)
        except OSError:
            return ""
        self.projects[key] = meta
        if meta.pending_size is None:
            self.pending.discard(path)
        else:
            self.pending.add(path)
        return meta.cwd

    def jail_of(self, transcript: TranscriptFile) -> str | None:
        """The real path of the dir a listed rollout must lie under."""
        for base in self.dirs:
            if transcript.path.is_relative_to(base):
                return os.path.realpath(base)
        return None


class TranscriptRoot:
    """The transcripts root: lists transcripts and resolves session ids, jailed.

    `list` and `resolve` refresh the index when it is older than
    `rescan_interval` (without waiting if another caller is at it); a miss of
    `resolve` refreshes it unless a refresh began after the miss did. `refreshes` and `dir_scans` count the refreshes
    and the directory listings they made. With `report_skipped`, the root logs the
    `.jsonl` files it skips because their names are not session ids, whenever they change.
    """

    def __init__(
        self,
        root: Path,
        *,
        rescan_interval: float = 2.0,
        report_skipped: bool = False,
        codex: Path | None = None,
    ) -> None:
        self.root = root
        self.codex = codex
        self._codex = _CodexTree(codex) if codex is not None else None
        self._report_skipped = report_skipped
        # Paths under the root of the `.jsonl` files skipped because their names are not ids.
        self.skipped: tuple[str, ...] = ()
        self._rescan_interval = rescan_interval
        self._lock = threading.Lock()  # held by the one refresh in progress
        self._snapshot = EMPTY_ROOT
        self._refreshed_at = float("-inf")  # when the last refresh started
        self._root_real = os.path.realpath(root)
        self._root_mtime: int | None = None
        self._projects: dict[str, _Project] = {}
        self.refreshes = 0
        self.dir_scans = 0

    # -- the index ----------------------------------------------------------

    def _scandir(self, path: str) -> list[os.DirEntry[str]]:
        self.dir_scans += 1
        with os.scandir(path) as entries:
            return list(entries)

    def _scan_project(self, name: str, now_ns: int) -> _Project:
        """Every transcript of one project dir that stays inside it."""
        project = _Project()
        path = os.path.join(self.root, name)
        project_real = os.path.join(self._root_real, name)
        project.mtimes[path] = _mtime(path, now_ns)  # before listing: see _UNSTABLE_NS
        try:
            entries = self._scandir(path)
        except OSError:
            return project
        for entry in entries:
            session_id = session_id_of(entry.name)
            if session_id is not None:
                if self._inside(entry, project_real) and _is_file(entry):
                    project.files.append(
                        TranscriptFile(
                            session_id=session_id,
                            project_dir=name,
                            path=Path(entry.path),
                            is_subagent=session_id.startswith("agent-"),
                            parent_session_id="",
                        )
                    )
            elif ID_PATTERN.fullmatch(entry.name) and _is_dir(entry):
                self._scan_subagents(project, name, entry, project_real, now_ns)
            elif entry.name.endswith(TRANSCRIPT_SUFFIX) and _is_file(entry):
                project.skipped.append(f"{name}/{entry.name}")
        return project

    def _scan_subagents(
        self,
        project: _Project,
        name: str,
        session_dir: os.DirEntry[str],
        project_real: str,
        now_ns: int,
    ) -> None:
        # The session dir's mtime shows a `subagents` dir appearing later.
        project.mtimes[session_dir.path] = _mtime(session_dir.path, now_ns)
        subagents = os.path.join(session_dir.path, SUBAGENT_DIR)
        if not os.path.isdir(subagents):
            return
        subagents_real = os.path.realpath(subagents)
        if not _under(subagents_real, project_real):
            return  # the session dir or its subagents dir is a link out of the project
        project.mtimes[subagents] = _mtime(subagents, now_ns)
        try:
            children = self._scandir(subagents)
        except OSError:
            return
        for child in children:
            child_id = session_id_of(child.name)
            if child_id is None and child.name.endswith(TRANSCRIPT_SUFFIX) and _is_file(child):
                project.skipped.append(f"{name}/{session_dir.name}/{SUBAGENT_DIR}/{child.name}")
            elif child_id is not None and self._inside(child, project_real) and _is_file(child):
                project.files.append(
                    TranscriptFile(
                        session_id=child_id,
                        project_dir=name,
                        path=Path(child.path),
                        is_subagent=True,
                        parent_session_id=session_dir.name,
                    )
                )

    @staticmethod
    def _inside(entry: os.DirEntry[str], directory_real: str) -> bool:
        """True if an entry resolves inside that dir (its parent does: only links need resolving)."""
        if not _is_link(entry):
            return True
        return _under(os.path.realpath(entry.path), directory_real)

    @staticmethod
    def _changed(mtimes: dict[str, int | None], now_ns: int) -> bool:
        return any(old is None or _mtime(path, now_ns) != old for path, old in mtimes.items())

    def _refresh_locked(self) -> None:
        """Bring the index up to date: stat the known dirs, list only those that changed."""
        self.refreshes += 1
        self._refreshed_at = time.monotonic()
        now_ns = time.time_ns()
        root_real = os.path.realpath(self.root)
        if root_real != self._root_real:  # the root is a link that was repointed
            self._root_real, self._root_mtime, self._projects = root_real, None, {}
        root = str(self.root)
        root_mtime = _mtime(root, now_ns)
        changed = False
        if root_mtime is None or root_mtime != self._root_mtime:
            self._root_mtime = root_mtime
            try:
                names = {p.name for p in self._scandir(root) if _is_real_dir(p)}
            except OSError:
                names = set()
            for gone in set(self._projects) - names:
                del self._projects[gone]
                changed = True
            new = names - set(self._projects)
            for name in new:
                self._projects[name] = self._scan_project(name, now_ns)
                changed = True
        else:
            new = set()
        for name, project in list(self._projects.items()):
            if name not in new and self._changed(project.mtimes, now_ns):
                self._projects[name] = self._scan_project(name, now_ns)
                changed = True
        if self._codex is not None:
            if self._codex.changed(now_ns):
                self._codex.scan(now_ns)
                changed = True
            elif self._codex.found_projects():
                changed = True
        if changed or self._snapshot is EMPTY_ROOT:
            by_id: dict[str, list[TranscriptFile]] = {}
            files = [t for project in self._projects.values() for t in project.files]
            if self._codex is not None:
                files += self._codex.files
            for transcript in files:
                by_id.setdefault(transcript.session_id, []).append(transcript)
            self._snapshot = RootSnapshot({k: tuple(v) for k, v in by_id.items()}, tuple(files))
            skipped = tuple(
                sorted(n for project in self._projects.values() for n in project.skipped)
            )
            if self._report_skipped and skipped != self.skipped:
                log_skipped(skipped)
            self.skipped = skipped

    def _refresh_if_older(self, max_age: float) -> RootSnapshot:
        """The snapshot, refreshed first if older than max_age (built on first use).

        A caller that finds a refresh in progress does not queue behind it: it
        answers from the current snapshot, so this never stalls anyone.
        """
        if self._refreshed_at == float("-inf"):
            return self._refresh_since(float("-inf"))  # the first index: wait for it
        if time.monotonic() - self._refreshed_at <= max_age:
            return self._snapshot
        if not self._lock.acquire(blocking=False):
            return self._snapshot
        try:
            if time.monotonic() - self._refreshed_at > max_age:
                self._refresh_locked()
        finally:
            self._lock.release()
        return self._snapshot

    def _refresh_since(self, asked_at: float) -> RootSnapshot:
        """The snapshot of a refresh that began after `asked_at` (one refresh serves a crowd)."""
        with self._lock:
            if self._refreshed_at <= asked_at:
                self._refresh_locked()
            return self._snapshot

    # -- the API ------------------------------------------------------------

    def list(self, principal: Principal | None) -> list[TranscriptFile]:
        """The transcripts the principal may see (index up to rescan_interval old)."""
        snapshot = self._refresh_if_older(self._rescan_interval)
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
        snapshot = self._refresh_if_older(self._rescan_interval)
        candidates = self._visible(snapshot, bare, source, principal)
        if not candidates or not all(self.exists(c) for c in candidates):
            candidates = self._visible(self._refresh_since(asked_at), bare, source, principal)
        if not candidates:
            raise SessionNotFoundError()
        if len(candidates) > 1:
            raise AmbiguousSessionError()
        transcript = candidates[0]
        if not self.is_jailed(transcript):
            raise SessionNotFoundError()
        return transcript

    @staticmethod
    def _visible(
        snapshot: RootSnapshot, session_id: str, source: str, principal: Principal | None
    ) -> tuple[TranscriptFile, ...]:
        """The transcripts a session id names for that principal (see resolve)."""
        seen = [
            t for t in snapshot.by_id.get(session_id, ()) if visible_to(principal, t.project_dir)
        ]
        if not source:
            source = min((t.source for t in seen), key=SESSION_SOURCES.index, default="")
        return tuple(t for t in seen if t.source == source)

    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str:
        """The id a principal names a listed transcript by: its bare session id when that
        resolves to its source for the principal, else `<source>:<id>` (see resolve)."""
        rank = SESSION_SOURCES.index(transcript.source)
        for other in self._snapshot.by_id.get(transcript.session_id, ()):
            if SESSION_SOURCES.index(other.source) < rank and visible_to(
                principal, other.project_dir
            ):
                return transcript.source + SOURCE_SEPARATOR + transcript.session_id
        return transcript.session_id

    def exists(self, transcript: TranscriptFile) -> bool:
        """True if a listed transcript is still there."""
        return os.path.exists(transcript.path)

    def stat(self, transcript: TranscriptFile) -> SourceStat:
        """A listed transcript's size and times (OSError if it is gone)."""
        return os.stat(transcript.path)

    @property
    def location(self) -> str:
        """Where the transcripts are, for log lines (a directory, or a bucket's URL)."""
        return str(self.root)

    def key_of(self, transcript: TranscriptFile) -> str:
        """A transcript's stable name in the state store's indexes (search, line index).

        Its path under the root; a rollout's is its path under the Codex home
        (`sessions/...` or `archived_sessions/...`) after `//codex/`, which no
        path under the root can start with.
        """
        if transcript.source == CODEX and self.codex is not None:
            home = self.codex.parent
            return "//codex/" + os.path.relpath(transcript.path, home).replace(os.sep, "/")
        return os.path.relpath(transcript.path, self.root).replace(os.sep, "/")

    def is_jailed(self, transcript: TranscriptFile) -> bool:
        """True if the transcript's real location lies under its project dir's real location."""
        return self._is_real_path_jailed(os.path.realpath(transcript.path), transcript)

    def _is_real_path_jailed(self, real: str, transcript: TranscriptFile) -> bool:
        if transcript.source == CODEX:
            jail = None if self._codex is None else self._codex.jail_of(transcript)
            return jail is not None and _under(real, jail)
        project = os.path.join(self.root, transcript.project_dir)
        project_real = os.path.join(self._root_real, transcript.project_dir)
        # The project dir itself must be a real directory under the root, not a link.
        return not os.path.islink(project) and _under(real, project_real)

    def open(self, transcript: TranscriptFile) -> ByteSource:
        """Open a resolved transcript for reading, re-checking the jail at open time."""
        real = os.path.realpath(transcript.path)
        if not self._is_real_path_jailed(real, transcript):
            raise SessionNotFoundError()
        try:
            return LocalSource(os.open(real, os.O_RDONLY | os.O_CLOEXEC))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            raise SessionNotFoundError() from None

    def open_listed(self, transcript: TranscriptFile) -> ByteSource:
        """The transcript as the last listing saw it, for what a listing shows (titles,
        insight, the indexer's pass): a file is opened as `open` does."""
        return self.open(transcript)

    def read_listed(self, transcript: TranscriptFile, work: Callable[[ByteSource], T]) -> T:
        """`work` on the transcript as listed (`open_listed`), closed after."""
        with self.open_listed(transcript) as source:
            return work(source)
