"""Gemini CLI's sessions on a filesystem: `<home>/tmp/<project>/chats/` (scrollback.layouts).

Listed again whole when a dir it came from changed (the `tmp` dir, a
project's dir and its `chats` dir, each sub-agents' dir), as Codex's tree is
(scrollback.directory). A session's id is read from its first line once per
file (path, device, inode) and kept; a file whose first line is still being
written is read again once it has grown. A session is jailed to the real path
of the `chats` dir it was listed from; symlinked dirs are not walked. The
project is what `.project_root` says, read at each listing of its dir.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from scrollback.layouts import (
    GEMINI,
    GEMINI_CHATS_DIR,
    GEMINI_LEGACY_SUFFIX,
    GEMINI_PROJECT_ROOT_FILE,
    GEMINI_TMP_DIR,
    gemini_chat_names,
    gemini_project,
    read_gemini_header,
)
from scrollback.linefile import LocalSource
from scrollback.transcripts import TranscriptFile

# A directory whose mtime is this close to the time it was listed may change
# again within the same coarse clock tick: listed again until it is older.
_UNSTABLE_NS = 20_000_000


def _dir_state(path: str, now_ns: int) -> int | None:
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return -1
    return None if now_ns - mtime < _UNSTABLE_NS else mtime


def _real_dirs(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as listing:
            return [e for e in listing if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _files(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as listing:
            return [e for e in listing if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _read_small(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(4096)
    except OSError:
        return None


def is_legacy(transcript: TranscriptFile) -> bool:
    """True for an older whole-document session (`session-*.json`)."""
    return transcript.location.endswith(GEMINI_LEGACY_SUFFIX)


@dataclass(frozen=True, slots=True)
class _Header:
    session_id: str
    pending_size: int | None  # None: final


class GeminiTree:
    """The sessions under Gemini CLI's home (`<home>/tmp`), with the dirs' mtimes."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.tmp = home / GEMINI_TMP_DIR
        self.files: list[TranscriptFile] = []
        self.mtimes: dict[str, int | None] = {}
        self.headers: dict[tuple[str, int, int], _Header] = {}
        self.pending = False
        self.scans = 0

    def changed(self, now_ns: int) -> bool:
        """True if a dir it came from changed, or a first line was still being written."""
        if not self.mtimes or self.pending:
            return True
        return any(old is None or _dir_state(p, now_ns) != old for p, old in self.mtimes.items())

    def scan(self, now_ns: int) -> None:
        """List every session again."""
        self.scans += 1
        self.mtimes = {}
        self.pending = False
        known, self.headers = self.headers, {}
        files: list[TranscriptFile] = []
        tmp = str(self.tmp)
        self.mtimes[tmp] = _dir_state(tmp, now_ns)
        for project in _real_dirs(tmp):
            self.mtimes[project.path] = _dir_state(project.path, now_ns)
            chats = os.path.join(project.path, GEMINI_CHATS_DIR)
            if not os.path.isdir(chats) or os.path.islink(chats):
                continue
            self.mtimes[chats] = _dir_state(chats, now_ns)
            name = gemini_project(
                _read_small(os.path.join(project.path, GEMINI_PROJECT_ROOT_FILE)), project.name
            )
            self._chats(project.name, name, chats, files, now_ns, known)
        self.files = files

    def _chats(
        self,
        slug: str,
        project: str,
        chats: str,
        files: list[TranscriptFile],
        now_ns: int,
        known: dict[tuple[str, int, int], _Header],
    ) -> None:
        for entry in _files(chats):
            names = gemini_chat_names([slug, GEMINI_CHATS_DIR, entry.name])
            if names is not None:
                session_id = self._session_id(entry.path, names[1], known)
                files.append(TranscriptFile(session_id, project, entry.path, False, "", GEMINI))
        for parent in _real_dirs(chats):
            self.mtimes[parent.path] = _dir_state(parent.path, now_ns)
            for entry in _files(parent.path):
                names = gemini_chat_names([slug, GEMINI_CHATS_DIR, parent.name, entry.name])
                if names is not None:
                    files.append(
                        TranscriptFile(names[1], project, entry.path, True, names[2], GEMINI)
                    )

    def _session_id(self, path: str, stem: str, known: dict[tuple[str, int, int], _Header]) -> str:
        """The header's sessionId (read once per file), else the file's stem."""
        if path.endswith(GEMINI_LEGACY_SUFFIX):
            return stem
        try:
            stat = os.stat(path)
            key = (path, stat.st_dev, stat.st_ino)
            header = known.get(key)
            if header is None or header.pending_size not in (None, stat.st_size):
                with LocalSource(os.open(path, os.O_RDONLY | os.O_CLOEXEC)) as source:
                    size = source.stat().st_size
                    session_id, final = read_gemini_header(source)
                header = _Header(session_id, None if final else size)
        except OSError:
            return stem
        self.headers[key] = header
        if header.pending_size is not None:
            self.pending = True
        return header.session_id or stem

    def jail_of(self, transcript: TranscriptFile) -> str | None:
        """The real path of the `chats` dir a listed session must lie under."""
        location = Path(transcript.location)
        chats = location.parent.parent if transcript.is_subagent else location.parent
        if chats.name != GEMINI_CHATS_DIR or not chats.is_relative_to(self.tmp):
            return None
        return os.path.realpath(chats)
