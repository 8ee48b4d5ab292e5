"""Generated opencode databases: the tables opencode writes, with what a reader must find.

The schema is opencode's own (packages/opencode/src/session/session.sql.ts and
its drizzle migrations, `packages/opencode/migration/*/migration.sql`): tables
`project`, `session`, `message`, `part` (ids are text primary keys of rowid
tables, times integer milliseconds, `data` the JSON text of a message or part
without its ids, as drizzle's `text({mode: "json"})` writes it with
JSON.stringify: compact, `/` unescaped). `OpencodeDb` writes rows as opencode
does, in WAL mode, and remembers per message the images of its line in
enumeration order (file parts' `url` data URLs, then tool attachments, in
part id order) and per part its own, so tests compare what a reader serves
with what was written.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.media import png_bytes

DIRECTORY = "/home/dev/opencode-project"
PROJECT_ID = "proj_4f1c2a"
MODEL = "claude-sonnet-4"

# opencode's tables as its migrations leave them (the columns read here and a few others).
SCHEMA = """
CREATE TABLE `project` (
  `id` text PRIMARY KEY, `worktree` text NOT NULL, `vcs` text, `name` text,
  `icon_url` text, `icon_color` text, `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL, `time_initialized` integer, `sandboxes` text NOT NULL
);
CREATE TABLE `session` (
  `id` text PRIMARY KEY, `project_id` text NOT NULL, `workspace_id` text, `parent_id` text,
  `slug` text NOT NULL, `directory` text NOT NULL, `path` text, `title` text NOT NULL,
  `version` text NOT NULL, `share_url` text, `summary_additions` integer,
  `summary_deletions` integer, `summary_files` integer, `summary_diffs` text,
  `revert` text, `permission` text, `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL, `time_compacting` integer, `time_archived` integer,
  CONSTRAINT `fk_session_project_id_project_id_fk` FOREIGN KEY (`project_id`)
    REFERENCES `project`(`id`) ON DELETE CASCADE
);
CREATE TABLE `message` (
  `id` text PRIMARY KEY, `session_id` text NOT NULL, `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL, `data` text NOT NULL,
  CONSTRAINT `fk_message_session_id_session_id_fk` FOREIGN KEY (`session_id`)
    REFERENCES `session`(`id`) ON DELETE CASCADE
);
CREATE TABLE `part` (
  `id` text PRIMARY KEY, `message_id` text NOT NULL, `session_id` text NOT NULL,
  `time_created` integer NOT NULL, `time_updated` integer NOT NULL, `data` text NOT NULL,
  CONSTRAINT `fk_part_message_id_message_id_fk` FOREIGN KEY (`message_id`)
    REFERENCES `message`(`id`) ON DELETE CASCADE
);
CREATE TABLE `todo` (
  `session_id` text NOT NULL, `content` text NOT NULL, `status` text NOT NULL,
  `priority` text NOT NULL, `position` integer NOT NULL, `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL, PRIMARY KEY(`session_id`, `position`)
);
CREATE INDEX `session_project_idx` ON `session` (`project_id`);
CREATE INDEX `session_parent_idx` ON `session` (`parent_id`);
CREATE INDEX `message_session_time_created_id_idx` ON `message` (`session_id`,`time_created`,`id`);
CREATE INDEX `part_message_id_id_idx` ON `part` (`message_id`,`id`);
CREATE INDEX `part_session_idx` ON `part` (`session_id`);
"""


def data_url(data: bytes, mime: str = "image/png") -> str:
    """A base64 data URL, as opencode keeps a pasted image or a tool's attachment."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def dumps(value: Any) -> str:
    """JSON text as JSON.stringify writes it: compact, non-ASCII kept, `/` not escaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def file_part(image: bytes, filename: str = "shot.png", mime: str = "image/png") -> dict[str, Any]:
    """A file part's data holding an image as a data URL."""
    return {"type": "file", "mime": mime, "filename": filename, "url": data_url(image, mime)}


def tool_part(
    call: str, tool: str, output: str, attachments: Sequence[bytes] = ()
) -> dict[str, Any]:
    """A completed tool part's data; its attachments are file parts with data URLs."""
    state: dict[str, Any] = {
        "status": "completed",
        "input": {"filePath": f"{DIRECTORY}/src/app.ts"},
        "output": output,
        "title": "src/app.ts",
        "metadata": {},
        "time": {"start": 1, "end": 2},
    }
    if attachments:
        state["attachments"] = [
            {"id": f"prt_att{n}", "sessionID": "", "messageID": "", **file_part(a, f"a{n}.png")}
            for n, a in enumerate(attachments)
        ]
    return {"type": "tool", "callID": call, "tool": tool, "state": state}


def tokens(input_: int, output: int) -> dict[str, Any]:
    """A message's or step's token counts."""
    return {"input": input_, "output": output, "reasoning": 0, "cache": {"read": 0, "write": 0}}


@dataclass
class OpencodeDb:
    """An opencode database being written (WAL mode, as opencode opens it)."""

    path: Path
    clock: int = 1_760_000_000_000
    counter: int = 0
    # message id -> the images of its line, in enumeration order; part id -> its own.
    images: dict[str, list[bytes]] = field(default_factory=dict)
    part_images: dict[str, list[bytes]] = field(default_factory=dict)
    conn: sqlite3.Connection = field(init=False)

    def __post_init__(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        if not self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'part'").fetchone():
            self.conn.executescript(SCHEMA)
            self.conn.execute(
                "INSERT INTO project VALUES (?, ?, 'git', NULL, NULL, NULL, ?, ?, NULL, '[]')",
                (PROJECT_ID, DIRECTORY, self.clock, self.clock),
            )

    def _next(self, prefix: str) -> tuple[str, int]:
        """A new id of that kind (ids sort by time, as opencode's do) and its time."""
        self.counter += 1
        self.clock += 1000
        return f"{prefix}_{self.clock:013d}{self.counter:06d}x", self.clock

    def session(self, title: str, *, parent: str | None = None, directory: str = DIRECTORY) -> str:
        """A new session (a sub-session when `parent` is given); its id."""
        sid, now = self._next("ses")
        self.conn.execute(
            "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version,"
            " time_created, time_updated) VALUES (?, ?, ?, ?, ?, ?, '1.2.0', ?, ?)",
            (sid, PROJECT_ID, parent, "calm-otter", directory, title, now, now),
        )
        return sid

    def message(self, session: str, data: dict[str, Any]) -> str:
        """A new message row of that session; its id."""
        mid, now = self._next("msg")
        self.conn.execute(
            "INSERT INTO message VALUES (?, ?, ?, ?, ?)", (mid, session, now, now, dumps(data))
        )
        self.images.setdefault(mid, [])
        return mid

    def part(self, session: str, message: str, data: dict[str, Any], *images: bytes) -> str:
        """A new part row of that message (`images`: those its data holds); its id."""
        pid, now = self._next("prt")
        self.conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
            (pid, message, session, now, now, dumps(data)),
        )
        self.images.setdefault(message, []).extend(images)
        self.part_images[pid] = list(images)
        return pid

    def update_part(self, part: str, data: dict[str, Any]) -> None:
        """Rewrite a part's data, as opencode updates a part in place."""
        self.clock += 1000
        self.conn.execute(
            "UPDATE part SET data = ?, time_updated = ? WHERE id = ?",
            (dumps(data), self.clock, part),
        )

    def update_message(self, message: str, data: dict[str, Any]) -> None:
        """Rewrite a message's data (an assistant message completing)."""
        self.clock += 1000
        self.conn.execute(
            "UPDATE message SET data = ?, time_updated = ? WHERE id = ?",
            (dumps(data), self.clock, message),
        )

    def user(self, session: str, text: str, *images: bytes) -> str:
        """A user message: its text part, and a file part per pasted image."""
        mid = self.message(
            session,
            {
                "role": "user",
                "time": {"created": self.clock},
                "agent": "build",
                "model": {"providerID": "anthropic", "modelID": MODEL},
            },
        )
        self.part(session, mid, {"type": "text", "text": text})
        for n, image in enumerate(images):
            self.part(session, mid, file_part(image, f"paste-{n}.png"), image)
        return mid

    def assistant_data(self, parent: str, *, completed: bool = True) -> dict[str, Any]:
        """An assistant message's data (without `time.completed` while it streams)."""
        time: dict[str, int] = {"created": self.clock}
        if completed:
            time["completed"] = self.clock + 500
        return {
            "role": "assistant",
            "time": time,
            "parentID": parent,
            "modelID": MODEL,
            "providerID": "anthropic",
            "mode": "build",
            "agent": "build",
            "path": {"cwd": DIRECTORY, "root": DIRECTORY},
            "cost": 0.0125,
            "tokens": tokens(1200, 340),
        }

    def assistant(self, session: str, parent: str, text: str, *, completed: bool = True) -> str:
        """An assistant message with a step, its text and the step's finish."""
        mid = self.message(session, self.assistant_data(parent, completed=completed))
        self.part(session, mid, {"type": "step-start", "snapshot": "4b825dc6"})
        self.part(session, mid, {"type": "text", "text": text, "time": {"start": 1, "end": 2}})
        if completed:
            self.part(
                session,
                mid,
                {
                    "type": "step-finish",
                    "reason": "stop",
                    "cost": 0.0125,
                    "tokens": tokens(1200, 340),
                },
            )
        return mid

    def close(self) -> None:
        """Close the writer's connection."""
        self.conn.close()


@dataclass
class Sample:
    """The ids a standard database holds."""

    db: OpencodeDb
    session: str
    child: str
    other: str
    messages: list[str]
    streaming: str
    photo_message: str
    tool_message: str


def write_sample(path: Path, *, seed: int = 0) -> Sample:
    """A database of every part type: a session with a sub-session, pasted images in file
    parts, images in tool attachments, and an assistant message still streaming at its end."""
    db = OpencodeDb(path)
    session = db.session("Fix the login page")
    child = db.session("Explore the auth module (@explore subagent)", parent=session)
    other = db.session("Other project work", directory="/home/dev/other")
    photo = png_bytes(30_000, seed=seed + 1)
    first = db.user(session, "the login button is broken, see the screenshot", photo)
    a1 = db.message(session, db.assistant_data(first))
    db.part(session, a1, {"type": "step-start", "snapshot": "4b825dc6"})
    db.part(session, a1, {"type": "reasoning", "text": "The button handler", "time": {"start": 1}})
    shots = [png_bytes(20_000, seed=seed + 2), png_bytes(25_000, seed=seed + 3)]
    db.part(session, a1, tool_part("call_1", "read", "export function login() {}", shots), *shots)
    db.part(session, a1, {"type": "patch", "hash": "9f2c1e", "files": [f"{DIRECTORY}/src/app.ts"]})
    db.part(session, a1, {"type": "snapshot", "snapshot": "4b825dc6"})
    db.part(session, a1, {"type": "agent", "name": "explore"})
    db.part(
        session,
        a1,
        {"type": "subtask", "prompt": "look at auth", "description": "auth", "agent": "explore"},
    )
    db.part(session, a1, {"type": "text", "text": "Fixed the handler.", "time": {"start": 1}})
    db.part(
        session,
        a1,
        {"type": "step-finish", "reason": "stop", "cost": 0.0125, "tokens": tokens(1200, 340)},
    )
    second = db.user(session, "thanks; compact now")
    db.part(session, second, {"type": "compaction", "auto": False})
    a2 = db.assistant(session, second, "Summary of the work so far.")
    child_user = db.user(child, "explore the auth module")
    db.assistant(child, child_user, "auth lives in src/auth.ts")
    db.user(other, "unrelated prompt")
    third = db.user(session, "one more thing")
    streaming = db.assistant(session, third, "Working on it", completed=False)
    return Sample(db, session, child, other, [first, a1, second, a2, third], streaming, first, a1)
