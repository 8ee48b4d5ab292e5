"""Where each tool keeps its transcripts: the Claude Code and Codex layouts, as plain functions.

Every source (scrollback.directory over a directory, scrollback.bucket over
object keys) names its transcripts by these rules (docs/contract.md §1), so
they are written once here and never overridden:

- Claude Code: `<project>/<sessionId>.jsonl`; sub-agents at
  `<project>/<sessionId>/subagents/agent-<id>.jsonl` or (legacy)
  `<project>/agent-<id>.jsonl`. The session id is the file name without
  `.jsonl`; a `.jsonl` file whose name is not an id is skipped (and reported).
- Codex CLI: `<sessions>/YYYY/MM/DD/rollout-<timestamp>-<uuid>.jsonl` and the
  sibling `archived_sessions/rollout-...jsonl`. The session id is the uuid at
  the end of the file name (else the file name, when it is an id), the project
  the `cwd` of the rollout's first line (`session_meta`, `read_session_meta`).
- Gemini CLI: `<home>/tmp/<project>/chats/session-<time>-<id prefix>.jsonl`
  (and the older whole-document `session-*.json`), sub-agents at
  `chats/<parent session id>/<session id>.jsonl` (`gemini_chat_names`). The
  session id is the `sessionId` of the file's first line (`read_gemini_header`),
  else the file name without its suffix; the project is the path written in
  `<project>/.project_root` (`gemini_project`), else the directory's name.
"""

from __future__ import annotations

import re

import orjson

from scrollback.contract.refs import CLAUDE_CODE as CLAUDE_CODE
from scrollback.contract.refs import CODEX as CODEX
from scrollback.contract.refs import GEMINI as GEMINI
from scrollback.contract.refs import ID_PATTERN
from scrollback.linefile import ByteSource, LineFile

TRANSCRIPT_SUFFIX = ".jsonl"
# Codex's archive: a sibling of its sessions dir.
CODEX_ARCHIVE_DIR = "archived_sessions"
# How deep the dated tree of Codex's sessions dir is walked (YYYY/MM/DD).
CODEX_DEPTH = 3
SUBAGENT_DIR = "subagents"
# A rollout's first line (session_meta, its instructions included) is read up to this long.
SESSION_META_MAX = 1024 * 1024
# The first read of a rollout's first line (most are a few KiB), growing fourfold after.
_META_FIRST_READ = 64 * 1024
_ROLLOUT_UUID = re.compile(
    r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl"
)


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


def claude_code_names(parts: list[str]) -> tuple[str, str, str] | str | None:
    """What the relative name `parts` is by the Claude Code layout, with no directory to ask.

    (project, session id, parent session id or "") for a transcript; the name
    itself (joined) for a `.jsonl` file that is skipped because its name is not
    an id; None for anything else.
    """
    if not parts[-1].endswith(TRANSCRIPT_SUFFIX) or not parts[0]:
        return None
    if len(parts) == 2:
        session_id = session_id_of(parts[1])
        return "/".join(parts) if session_id is None else (parts[0], session_id, "")
    if len(parts) == 4 and parts[2] == SUBAGENT_DIR and ID_PATTERN.fullmatch(parts[1]):
        child = session_id_of(parts[3])
        return "/".join(parts) if child is None else (parts[0], child, parts[1])
    return None


def is_subagent_id(session_id: str, parent_session_id: str) -> bool:
    """True for a sub-agent's transcript: under a session's `subagents`, or a legacy `agent-<id>`."""
    return bool(parent_session_id) or session_id.startswith("agent-")


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


# Gemini CLI's sessions: `<home>/tmp/<project>/chats/...` (packages/core/src/config/storage.ts).
GEMINI_TMP_DIR = "tmp"
GEMINI_CHATS_DIR = "chats"
GEMINI_SESSION_PREFIX = "session-"
GEMINI_LEGACY_SUFFIX = ".json"
GEMINI_PROJECT_ROOT_FILE = ".project_root"
# The most of `.project_root` read (an absolute path).
_PROJECT_ROOT_MAX = 4096


def gemini_chat_names(parts: list[str]) -> tuple[str, str, str] | None:
    """What a name relative to Gemini's `tmp` dir is: (project dir, file stem, parent id or "").

    `<project>/chats/session-*.jsonl` (or `.json`) is a session; `<project>/chats/
    <parent id>/<id>.jsonl` a sub-agent's. None for anything else.
    """
    if (
        len(parts) == 3
        and parts[1] == GEMINI_CHATS_DIR
        and parts[2].startswith(GEMINI_SESSION_PREFIX)
    ):
        name = parts[2]
        for suffix in (TRANSCRIPT_SUFFIX, GEMINI_LEGACY_SUFFIX):
            stem = name[: -len(suffix)]
            if name.endswith(suffix) and ID_PATTERN.fullmatch(stem):
                return parts[0], stem, ""
        return None
    if len(parts) == 4 and parts[1] == GEMINI_CHATS_DIR and ID_PATTERN.fullmatch(parts[2]):
        stem = parts[3][: -len(TRANSCRIPT_SUFFIX)]
        if parts[3].endswith(TRANSCRIPT_SUFFIX) and ID_PATTERN.fullmatch(stem):
            return parts[0], stem, parts[2]
    return None


def gemini_project(project_dir_text: bytes | None, dir_name: str) -> str:
    """A Gemini project's name: the path in its `.project_root` (trimmed), else the dir's name."""
    if project_dir_text:
        text = project_dir_text[:_PROJECT_ROOT_MAX].decode("utf-8", "replace").strip()
        if text:
            return text
    return dir_name


def read_gemini_header(fd: ByteSource) -> tuple[str, bool]:
    """The `sessionId` of a session file's first line (else ""), and whether that answer is
    final while the file only grows (as `read_session_meta`)."""
    line, ended = LineFile(fd).line_head(0, SESSION_META_MAX, _META_FIRST_READ)
    if line is None:
        return "", True
    session_id = _session_id_in(line) if ended or line else ""
    return session_id, ended or bool(session_id)


def _session_id_in(line: bytes) -> str:
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return ""
    value = entry.get("sessionId") if isinstance(entry, dict) else None
    return value if isinstance(value, str) and ID_PATTERN.fullmatch(value) else ""
