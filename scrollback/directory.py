"""The transcripts of a directory: Claude Code's projects dir, and Codex's sessions dir beside it.

The layouts are scrollback.layouts'; this module walks them on a filesystem
and jails what it finds (docs/contract.md §11): a project dir is a real
directory directly under the root (a symlinked project dir is not one), and a
transcript's real path (symlinks resolved) lies under its project dir's real
path, or the transcript does not exist. A rollout is jailed to the dir it was
listed from; symlinked dirs are not walked. Codex's sessions dir is listed
when configured; a rollout's project is the `cwd` of its first line, read once
per file (a rollout without one is listed with the project ""). That cwd is
trusted: whoever may write the Codex dir may place a session in any project.
A root made with `report_skipped` logs how many `.jsonl` files it skips
because their names are not ids, and a few of them, whenever they change.

Refreshing the index (scrollback.transcripts.Catalog) is incremental: stat
the directories it came from (root, project dirs, session and `subagents`
dirs) and list again only those whose mtime changed, so a refresh of an
unchanged tree lists nothing, whoever asks for it and however often.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from scrollback.contract.refs import ID_PATTERN
from scrollback.gemini_live import LiveView
from scrollback.gemini_tree import GeminiTree
from scrollback.layouts import (
    CODEX,
    CODEX_ARCHIVE_DIR,
    CODEX_DEPTH,
    GEMINI,
    GEMINI_LEGACY_SUFFIX,
    SUBAGENT_DIR,
    TRANSCRIPT_SUFFIX,
    read_session_meta,
    rollout_session_id,
    session_id_of,
)
from scrollback.linefile import ByteSource, FileVersion, LocalSource, SourceStat
from scrollback.principals import Principal
from scrollback.transcripts import (
    Catalog,
    RootSnapshot,
    SessionNotFoundError,
    TranscriptFile,
    log_skipped,
    read_closed,
)

T = TypeVar("T")

# A directory whose mtime is this close to the time we listed it may change
# again within the same coarse clock tick (kernels without fine-grained
# timestamps), leaving its mtime as it was: it is listed again at the next
# refresh, until it has been quiet for this long.
_UNSTABLE_NS = 20_000_000
# The mtime of a dir that is not there, so that one still missing is unchanged.
_ABSENT = -1


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


def _inside(entry: os.DirEntry[str], directory_real: str) -> bool:
    """True if an entry resolves inside that dir (its parent does: only links need resolving)."""
    if not _is_link(entry):
        return True
    return _under(os.path.realpath(entry.path), directory_real)


def _mtime(path: str, now_ns: int) -> int | None:
    """A directory's mtime, or None if missing or too recent to trust (see _UNSTABLE_NS)."""
    try:
        mtime_ns = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return None if now_ns - mtime_ns < _UNSTABLE_NS else mtime_ns


def _dir_state(path: str, now_ns: int) -> int | None:
    """As _mtime, but _ABSENT for a dir that does not exist (rather than None: list again)."""
    try:
        mtime_ns = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return _ABSENT
    except OSError:
        return None
    return None if now_ns - mtime_ns < _UNSTABLE_NS else mtime_ns


def _changed(mtimes: dict[str, int | None], now_ns: int) -> bool:
    return any(old is None or _mtime(path, now_ns) != old for path, old in mtimes.items())


@dataclass(slots=True)
class _Project:
    """One project dir's transcripts and the mtimes of the directories they came from."""

    files: list[TranscriptFile] = field(default_factory=list)
    mtimes: dict[str, int | None] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # `.jsonl` files whose names are not ids


def scan_project(
    root: str,
    root_real: str,
    name: str,
    now_ns: int,
    scandir: Callable[[str], list[os.DirEntry[str]]],
) -> _Project:
    """Every Claude Code transcript of one project dir that stays inside it."""
    project = _Project()
    path = os.path.join(root, name)
    project_real = os.path.join(root_real, name)
    project.mtimes[path] = _mtime(path, now_ns)  # before listing: see _UNSTABLE_NS
    try:
        entries = scandir(path)
    except OSError:
        return project
    for entry in entries:
        session_id = session_id_of(entry.name)
        if session_id is not None:
            if _inside(entry, project_real) and _is_file(entry):
                project.files.append(
                    TranscriptFile(
                        session_id=session_id,
                        project_dir=name,
                        location=entry.path,
                        is_subagent=session_id.startswith("agent-"),
                        parent_session_id="",
                    )
                )
        elif ID_PATTERN.fullmatch(entry.name) and _is_dir(entry):
            _scan_subagents(project, name, entry, project_real, now_ns, scandir)
        elif entry.name.endswith(TRANSCRIPT_SUFFIX) and _is_file(entry):
            project.skipped.append(f"{name}/{entry.name}")
    return project


def _scan_subagents(
    project: _Project,
    name: str,
    session_dir: os.DirEntry[str],
    project_real: str,
    now_ns: int,
    scandir: Callable[[str], list[os.DirEntry[str]]],
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
        children = scandir(subagents)
    except OSError:
        return
    for child in children:
        child_id = session_id_of(child.name)
        if child_id is None and child.name.endswith(TRANSCRIPT_SUFFIX) and _is_file(child):
            project.skipped.append(f"{name}/{session_dir.name}/{SUBAGENT_DIR}/{child.name}")
        elif child_id is not None and _inside(child, project_real) and _is_file(child):
            project.files.append(
                TranscriptFile(
                    session_id=child_id,
                    project_dir=name,
                    location=child.path,
                    is_subagent=True,
                    parent_session_id=session_dir.name,
                )
            )


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
            if transcript.location in self.pending:
                project = self._project(transcript.location)
                if project:
                    self.files[k] = dataclasses.replace(transcript, project_dir=project)
                    found = True
        return found

    def scan(self, now_ns: int) -> None:
        self.scans += 1
        self.mtimes = {}
        known, self.projects, self.pending = self.projects, {}, set()
        files: list[TranscriptFile] = []
        for depth, base in zip((CODEX_DEPTH, 0), self.dirs, strict=True):
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
                    location=entry.path,
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
            if Path(transcript.location).is_relative_to(base):
                return os.path.realpath(base)
        return None


class DirectoryRoot:
    """The transcripts under a directory (and Codex's and Gemini's under others): a TranscriptSource.

    `refreshes` and `dir_scans` count the refreshes and the directory listings
    they made; `skipped` holds the names of the `.jsonl` files skipped because
    they are not session ids.
    """

    def __init__(
        self,
        root: Path,
        *,
        rescan_interval: float = 2.0,
        report_skipped: bool = False,
        codex: Path | None = None,
        gemini: Path | None = None,
    ) -> None:
        self.root = root
        self.codex = codex
        self._codex = _CodexTree(codex) if codex is not None else None
        self.gemini = gemini
        self._gemini = GeminiTree(gemini) if gemini is not None else None
        self._report_skipped = report_skipped
        self.skipped: tuple[str, ...] = ()
        self._root_real = os.path.realpath(root)
        self._root_mtime: int | None = None
        self._projects: dict[str, _Project] = {}
        self._built = False
        self.refreshes = 0
        self.dir_scans = 0
        self._catalog = Catalog(
            self._rebuild,
            rescan_interval=rescan_interval,
            exists=self.exists,
            jailed=self.is_jailed,
        )

    # -- the index ----------------------------------------------------------

    def _scandir(self, path: str) -> list[os.DirEntry[str]]:
        self.dir_scans += 1
        with os.scandir(path) as entries:
            return list(entries)

    def _rescan_root(self, now_ns: int) -> tuple[bool, set[str]]:
        """List the root again if it changed: (whether projects came or went, the new ones)."""
        root_mtime = _mtime(str(self.root), now_ns)
        if root_mtime is not None and root_mtime == self._root_mtime:
            return False, set()
        self._root_mtime = root_mtime
        try:
            names = {p.name for p in self._scandir(str(self.root)) if _is_real_dir(p)}
        except OSError:
            names = set()
        gone = set(self._projects) - names
        for name in gone:
            del self._projects[name]
        new = names - set(self._projects)
        for name in new:
            self._projects[name] = self._scan(name, now_ns)
        return bool(gone or new), new

    def _scan(self, name: str, now_ns: int) -> _Project:
        return scan_project(str(self.root), self._root_real, name, now_ns, self._scandir)

    def _rebuild(self) -> RootSnapshot | None:
        """Stat the known dirs, list only those that changed; the new snapshot, None if unchanged."""
        self.refreshes += 1
        now_ns = time.time_ns()
        root_real = os.path.realpath(self.root)
        if root_real != self._root_real:  # the root is a link that was repointed
            self._root_real, self._root_mtime, self._projects = root_real, None, {}
        changed, new = self._rescan_root(now_ns)
        for name, project in list(self._projects.items()):
            if name not in new and _changed(project.mtimes, now_ns):
                self._projects[name] = self._scan(name, now_ns)
                changed = True
        if self._codex is not None:
            if self._codex.changed(now_ns):
                self._codex.scan(now_ns)
                changed = True
            elif self._codex.found_projects():
                changed = True
        if self._gemini is not None and self._gemini.changed(now_ns):
            self._gemini.scan(now_ns)
            changed = True
        if not changed and self._built:
            return None
        self._built = True
        files = [t for project in self._projects.values() for t in project.files]
        if self._codex is not None:
            files += self._codex.files
        if self._gemini is not None:
            files += self._gemini.files
        skipped = tuple(sorted(n for project in self._projects.values() for n in project.skipped))
        if self._report_skipped and skipped != self.skipped:
            log_skipped(skipped)
        self.skipped = skipped
        return RootSnapshot.of(files)

    # -- the source ---------------------------------------------------------

    def list(self, principal: Principal | None) -> list[TranscriptFile]:
        """The transcripts the principal may see (scrollback.transcripts.Catalog.list)."""
        return self._catalog.list(principal)

    def resolve(self, session_id: str, principal: Principal | None) -> TranscriptFile:
        """The transcript of a session id (scrollback.transcripts.Catalog.resolve)."""
        return self._catalog.resolve(session_id, principal)

    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str:
        """The id a principal names a listed transcript by (Catalog.name_of)."""
        return self._catalog.name_of(transcript, principal)

    def exists(self, transcript: TranscriptFile) -> bool:
        """True if a listed transcript is still there."""
        return os.path.exists(transcript.location)

    def stat(self, transcript: TranscriptFile) -> SourceStat:
        """A listed transcript's size and times (OSError if it is gone)."""
        return os.stat(transcript.location)

    @property
    def location(self) -> str:
        """The directory, for log lines."""
        return str(self.root)

    def key_of(self, transcript: TranscriptFile) -> str:
        """A transcript's stable name in the state store's indexes (search, line index).

        Its path under the root; a rollout's is its path under the Codex home
        (`sessions/...` or `archived_sessions/...`) after `//codex/`, which no
        path under the root can start with; a Gemini session's its path under
        Gemini's home after `//gemini/`.
        """
        if transcript.source == GEMINI and self.gemini is not None:
            return "//gemini/" + os.path.relpath(transcript.location, self.gemini).replace(
                os.sep, "/"
            )
        if transcript.source == CODEX and self.codex is not None:
            home = self.codex.parent
            return "//codex/" + os.path.relpath(transcript.location, home).replace(os.sep, "/")
        return os.path.relpath(transcript.location, self.root).replace(os.sep, "/")

    def is_jailed(self, transcript: TranscriptFile) -> bool:
        """True if the transcript's real location lies under its project dir's real location."""
        return self._is_real_path_jailed(os.path.realpath(transcript.location), transcript)

    def _is_real_path_jailed(self, real: str, transcript: TranscriptFile) -> bool:
        if transcript.source == CODEX:
            jail = None if self._codex is None else self._codex.jail_of(transcript)
            return jail is not None and _under(real, jail)
        if transcript.source == GEMINI:
            jail = None if self._gemini is None else self._gemini.jail_of(transcript)
            return jail is not None and _under(real, jail)
        project = os.path.join(self.root, transcript.project_dir)
        project_real = os.path.join(self._root_real, transcript.project_dir)
        # The project dir itself must be a real directory under the root, not a link.
        return not os.path.islink(project) and _under(real, project_real)

    def open(self, transcript: TranscriptFile) -> ByteSource:
        """Open a resolved transcript for reading, re-checking the jail at open time."""
        real = os.path.realpath(transcript.location)
        if not self._is_real_path_jailed(real, transcript):
            raise SessionNotFoundError()
        try:
            opened = LocalSource(os.open(real, os.O_RDONLY | os.O_CLOEXEC))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            raise SessionNotFoundError() from None
        if transcript.source != GEMINI:
            return opened
        # A Gemini session is read as the lines of its live messages (scrollback.gemini_live).
        try:
            return LiveView(opened, legacy=transcript.location.endswith(GEMINI_LEGACY_SUFFIX))
        except BaseException:
            opened.close()
            raise

    def open_listed(self, transcript: TranscriptFile) -> ByteSource:
        """The transcript as the last listing saw it: a file is opened as `open` does."""
        return self.open(transcript)

    def read_listed(self, transcript: TranscriptFile, work: Callable[[ByteSource], T]) -> T:
        """`work` on the transcript as listed (`open_listed`), closed after."""
        return read_closed(self.open_listed(transcript), work)

    def version(self, opened: ByteSource, stat: SourceStat | None = None) -> FileVersion:
        """Which bytes an open file holds: device, inode and its head (FileVersion.of)."""
        return FileVersion.of(opened, stat)
