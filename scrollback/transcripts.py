"""Finding transcripts under the root: the one place that turns a session id into a path.

Layout (CONTRACT section 1): `<root>/<project-dir>/<sessionId>.jsonl`; sub-agents
at `<root>/<project-dir>/<sessionId>/subagents/agent-<id>.jsonl` or (legacy)
`<root>/<project-dir>/agent-<id>.jsonl`. `*.meta.json` sidecars are not
transcripts. The session id is the file name without `.jsonl`; file names that
are not valid ids are ignored.

Every path handed out is jailed: its real path (symlinks resolved) lies under
the root's real path, or the transcript does not exist. A session id shared by
two transcripts is ambiguous and refused rather than guessed. Errors never
carry a path.

Visibility is enforced here too, so no RPC can forget it: `list` and
`resolve` only see the project dirs the current caller may read
(`scrollback.server.auth.project_visible`); a session in another project is not
found, the same answer as one that does not exist.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from scrollback.contract.refs import ID_PATTERN, validate_id
from scrollback.server.auth import project_visible

TRANSCRIPT_SUFFIX = ".jsonl"
SUBAGENT_DIR = "subagents"


class SessionNotFoundError(LookupError):
    """No transcript has that session id (or it lies outside the root)."""

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


def _session_id_of(name: str) -> str | None:
    if not name.endswith(TRANSCRIPT_SUFFIX):
        return None
    stem = name[: -len(TRANSCRIPT_SUFFIX)]
    return stem if ID_PATTERN.fullmatch(stem) else None


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


def _scan_project(project: os.DirEntry[str]) -> list[TranscriptFile]:
    found: list[TranscriptFile] = []
    try:
        entries = list(os.scandir(project.path))
    except OSError:
        return found
    for entry in entries:
        session_id = _session_id_of(entry.name)
        if session_id is not None and _is_file(entry):
            found.append(
                TranscriptFile(
                    session_id=session_id,
                    project_dir=project.name,
                    path=Path(entry.path),
                    is_subagent=session_id.startswith("agent-"),
                    parent_session_id="",
                )
            )
        elif ID_PATTERN.fullmatch(entry.name) and _is_dir(entry):
            subagents = os.path.join(entry.path, SUBAGENT_DIR)
            try:
                children = list(os.scandir(subagents))
            except OSError:
                continue
            for child in children:
                child_id = _session_id_of(child.name)
                if child_id is not None and _is_file(child):
                    found.append(
                        TranscriptFile(
                            session_id=child_id,
                            project_dir=project.name,
                            path=Path(child.path),
                            is_subagent=True,
                            parent_session_id=entry.name,
                        )
                    )
    return found


class TranscriptRoot:
    """The transcripts root: lists transcripts and resolves session ids, jailed.

    The listing is cached and rebuilt at most every `rescan_interval` seconds,
    plus once on a miss (so a session created a moment ago is found), so a
    request never walks the tree by itself more than that.
    """

    def __init__(self, root: Path, *, rescan_interval: float = 2.0) -> None:
        self.root = root
        self._rescan_interval = rescan_interval
        self._lock = threading.Lock()
        self._scanned_at = float("-inf")
        self._files: list[TranscriptFile] = []
        self._by_id: dict[str, list[TranscriptFile]] = {}
        self._dir_mtimes: dict[str, int] = {}
        self._root_real: str | None = None

    def _real_root(self) -> str:
        # Resolved again at every rescan, so a root that is itself a symlink
        # being repointed is followed within rescan_interval.
        if self._root_real is None:
            self._root_real = os.path.realpath(self.root)
        return self._root_real

    def _rescan(self) -> None:
        files: list[TranscriptFile] = []
        try:
            projects = [p for p in os.scandir(self.root) if _is_dir(p)]
        except OSError:
            projects = []
        for project in projects:
            files.extend(_scan_project(project))
        by_id: dict[str, list[TranscriptFile]] = {}
        for transcript in files:
            by_id.setdefault(transcript.session_id, []).append(transcript)
        self._files, self._by_id = files, by_id
        self._root_real = os.path.realpath(self.root)
        self._scanned_at = time.monotonic()
        self._dir_mtimes = {}
        for directory in [str(self.root), *(p.path for p in projects)]:
            try:
                self._dir_mtimes[directory] = os.stat(directory).st_mtime_ns
            except OSError:
                continue

    def _dirs_changed(self) -> bool:
        """True if the root or a project dir changed since the last scan (a cheap stat each)."""
        for directory, mtime_ns in self._dir_mtimes.items():
            try:
                if os.stat(directory).st_mtime_ns != mtime_ns:
                    return True
            except OSError:
                return True
        return False

    def _fresh(self, *, force: bool = False) -> None:
        with self._lock:
            age = time.monotonic() - self._scanned_at
            if (force and (age > 0.05 or self._dirs_changed())) or age > self._rescan_interval:
                self._rescan()

    def list(self) -> list[TranscriptFile]:
        """The transcripts under the root the caller may see (cached up to rescan_interval)."""
        self._fresh()
        return [t for t in self._files if project_visible(t.project_dir) and self.is_jailed(t.path)]

    def is_jailed(self, path: Path) -> bool:
        """True if the path's real location lies under the root's real location."""
        return self._is_real_path_jailed(os.path.realpath(path))

    def _is_real_path_jailed(self, real: str) -> bool:
        return real.startswith(self._real_root() + os.sep)

    def resolve(self, session_id: str) -> TranscriptFile:
        """The transcript of a session id; RefError, SessionNotFoundError or AmbiguousSessionError."""
        validate_id(session_id, "session id")
        self._fresh()
        candidates = self._by_id.get(session_id)
        if not candidates or not all(os.path.exists(c.path) for c in candidates):
            self._fresh(force=True)
            candidates = self._by_id.get(session_id)
        candidates = [c for c in candidates or () if project_visible(c.project_dir)]
        if not candidates:
            raise SessionNotFoundError()
        if len(candidates) > 1:
            raise AmbiguousSessionError()
        transcript = candidates[0]
        if not self.is_jailed(transcript.path):
            raise SessionNotFoundError()
        return transcript

    def open(self, transcript: TranscriptFile) -> BinaryIO:
        """Open a resolved transcript for reading, re-checking the jail at open time."""
        real = os.path.realpath(transcript.path)
        if not self._is_real_path_jailed(real):
            raise SessionNotFoundError()
        try:
            return open(real, "rb", buffering=0)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            raise SessionNotFoundError() from None
