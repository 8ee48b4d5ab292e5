"""opencode's export format: what `opencode export` writes and `opencode import` reads.

opencode's `packages/opencode/src/cli/cmd/export.ts` writes one JSON object,
`{"info": <session info>, "messages": [{"info": <message info>, "parts":
[<part>, ...]}, ...], "todos": [...]}`; `import.ts` reads `info` and
`messages` (decoded by its schemas) and inserts rows, skipping any message or
part whose id is already in the database. A session's info is its row as
opencode's `Session.fromRow` gives it (`id`, `slug`, `projectID`,
`directory`, `parentID`, `title`, `version`, `time.created` and
`time.updated`; import replaces the project and directory by the importing
project's); a message's info is its data with `id` and `sessionID`, a part
its data with `id`, `sessionID` and `messageID`.

Because import skips ids it has, a copy to import is given new ids: every
session, message and part id of a copy has the same tag appended
(`copy_tag`), so the copy's ids keep their order and never meet the
original's.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol, runtime_checkable

import xxhash

from scrollback.opencode.db import has_column, rows
from scrollback.transcripts import TranscriptFile

# The session columns an info is made of (the ones present are read), and their names in it.
_INFO_COLUMNS = (
    ("slug", "slug"),
    ("project_id", "projectID"),
    ("workspace_id", "workspaceID"),
    ("directory", "directory"),
    ("path", "path"),
    ("parent_id", "parentID"),
    ("title", "title"),
    ("version", "version"),
)
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
TAG_LENGTH = 8


def session_info(conn: sqlite3.Connection, session: str) -> dict[str, Any] | None:
    """A session's info as `opencode export` writes it (module docstring); None if gone."""
    present = [
        (column, name) for column, name in _INFO_COLUMNS if has_column(conn, "session", column)
    ]
    columns = ", ".join(column for column, _ in present)
    found = rows(
        conn,
        f"SELECT {columns}{', ' if columns else ''}time_created, time_updated"
        " FROM session WHERE id = ?",
        (session,),
    )
    if not found:
        return None
    *values, created, updated = found[0]
    info: dict[str, Any] = {"id": session}
    for (_, name), value in zip(present, values, strict=True):
        if value is not None:  # opencode's `?? undefined`: an absent member
            info[name] = value
    info.setdefault("slug", "")
    info.setdefault("projectID", "global")
    info.setdefault("directory", "")
    info.setdefault("version", "")
    info.setdefault("title", "")
    info["time"] = {"created": int(created or 0), "updated": int(updated or 0)}
    return info


def copy_tag(session_id: str, fork: str) -> str:
    """The tag a copy's ids end with: from the session copied and the fork asked for."""
    value = xxhash.xxh3_64_intdigest(f"{session_id}\0{fork}".encode())
    tag = []
    for _ in range(TAG_LENGTH):
        value, digit = divmod(value, 62)
        tag.append(_BASE62[digit])
    return "".join(tag)


@runtime_checkable
class SessionInfos(Protocol):
    """A source that can give a session's info in opencode's export format."""

    def session_info(self, transcript: TranscriptFile) -> dict[str, Any] | None: ...
