"""The sessions of opencode's database, as a TranscriptSource (source "opencode").

A session is a row of `session`: its id is the session id, its `directory`
the project (a caller sees it if it may read that project, as a Codex
rollout's cwd), its `parent_id` the parent of a sub-session (the task tool's),
its `title` the title listed. The index (scrollback.transcripts.Catalog)
lists the table again when it is older than the rescan interval, or at once
on a miss; a session id that is not an id of the contract is not listed.
`open` gives the session's view (scrollback.opencode.view), its map kept per
session while the session's rows are unchanged (indexed counts of its rows
check; while `PRAGMA data_version` says no one committed since this thread
checked, not even those).

A database that does not exist yet lists nothing; one locked, mid-migration
or unreadable raises OpencodeUnavailableError (UNAVAILABLE). There is no
file to jail: a session is what the database says.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from scrollback.contract.refs import ID_PATTERN, OPENCODE
from scrollback.linefile import ByteSource, FileVersion, SourceStat
from scrollback.opencode.db import OpencodeDatabase, has_column, rows
from scrollback.opencode.export import session_info
from scrollback.opencode.naming import images_in
from scrollback.opencode.view import (
    ChangeKey,
    SessionMap,
    SessionView,
    ViewStat,
    build_map,
    change_key,
    part_images,
    part_size,
    view_ino,
)
from scrollback.principals import Principal
from scrollback.transcripts import (
    Catalog,
    RootSnapshot,
    SessionNotFoundError,
    TranscriptFile,
    read_closed,
)

T = TypeVar("T")
# Maps kept (one per session opened lately), and the bytes they may hold together; the
# least recently made go first.
MAPS_KEPT = 256
MAPS_BYTES = 64 * 1024 * 1024
# Parts whose image counts are kept.
COUNTS_KEPT = 4096
# The prefix of a view's key in the state store's indexes (no path starts with it).
KEY_PREFIX = "//opencode/"

_SESSIONS = (
    "SELECT id, parent_id, {directory}, title, time_created, time_updated FROM session ORDER BY id"
)


def _sessions(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    """The session rows; without a `directory` column, every project is ""."""
    directory = "directory" if has_column(conn, "session", "directory") else "''"
    return rows(conn, _SESSIONS.format(directory=directory))


class OpencodeSource:
    """The sessions of one opencode database: a TranscriptSource."""

    def __init__(self, path: Path, *, rescan_interval: float = 2.0) -> None:
        self.db = OpencodeDatabase(path)
        self.refreshes = 0
        self.maps_built = 0
        self._rows: list[tuple[object, ...]] | None = None
        self._maps: dict[str, SessionMap] = {}
        self._maps_lock = threading.Lock()
        # (part rowid, data size) -> the images it holds (refs that name a later part).
        self._counts: dict[tuple[int, int], int] = {}
        # session -> the change key and the stat of its view (a listing's stats).
        self._stats: dict[str, tuple[ChangeKey, ViewStat]] = {}
        # Per thread: session -> the data version its kept map and existence were checked at.
        self._checked = threading.local()
        self._catalog = Catalog(
            self._rebuild, rescan_interval=rescan_interval, exists=self.exists, jailed=_always
        )

    @property
    def location(self) -> str:
        """The database file, for log lines."""
        return str(self.db.path)

    def _rebuild(self) -> RootSnapshot | None:
        """The sessions table listed again; None if it is as last listed."""
        self.refreshes += 1
        listed = self.db.read(_sessions) if self.db.exists() else []
        if listed == self._rows:
            return None
        self._rows = listed
        files = []
        for sid, parent, directory, title, _, _ in listed:
            if not isinstance(sid, str) or ID_PATTERN.fullmatch(sid) is None:
                continue
            parent_id = parent if isinstance(parent, str) and ID_PATTERN.fullmatch(parent) else ""
            files.append(
                TranscriptFile(
                    session_id=sid,
                    project_dir=str(directory or ""),
                    location=sid,
                    is_subagent=bool(parent),
                    parent_session_id=parent_id,
                    source=OPENCODE,
                    title=str(title or ""),
                )
            )
        return RootSnapshot.of(files)

    def list(self, principal: Principal | None) -> list[TranscriptFile]:
        """The sessions the principal may see (scrollback.transcripts.Catalog.list)."""
        return self._catalog.list(principal)

    def resolve(self, session_id: str, principal: Principal | None) -> TranscriptFile:
        """The session of an id (scrollback.transcripts.Catalog.resolve)."""
        return self._catalog.resolve(session_id, principal)

    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str:
        """The id a principal names a listed session by (Catalog.name_of)."""
        return self._catalog.name_of(transcript, principal)

    def _checked_at(self) -> dict[str, tuple[tuple[int, int], SessionMap]]:
        checked: dict[str, tuple[tuple[int, int], SessionMap]] | None = getattr(
            self._checked, "sessions", None
        )
        if checked is None:
            checked = self._checked.sessions = {}
        return checked

    def _unchanged(self, session: str) -> SessionMap | None:
        """The session's kept map if nothing was committed since this thread checked it."""
        seen = self._checked_at().get(session)
        if seen is None or seen[0] != self.db.data_version():
            return None
        with self._maps_lock:
            kept = self._maps.get(session)
        return kept if kept is seen[1] else None

    def exists(self, transcript: TranscriptFile) -> bool:
        """True if the session is still in the database."""
        if not self.db.exists():
            return False
        if self._unchanged(transcript.location) is not None:
            return True
        found = self.db.read(
            lambda conn: rows(conn, "SELECT 1 FROM session WHERE id = ?", (transcript.location,))
        )
        return bool(found)

    def _map(self, transcript: TranscriptFile) -> SessionMap:
        """The session's map now: the kept one while its rows are unchanged, else made anew."""
        session = transcript.location
        ino = view_ino(self.location, session)

        def read(conn: object) -> SessionMap:
            assert hasattr(conn, "execute")
            found = rows(conn, "SELECT 1 FROM session WHERE id = ?", (session,))  # type: ignore[arg-type]
            if not found:
                raise SessionNotFoundError()
            key = change_key(conn, session)  # type: ignore[arg-type]
            with self._maps_lock:
                kept = self._maps.get(session)
            if kept is not None and kept.key == key:
                return kept
            self.maps_built += 1
            return build_map(conn, session, key, ino)  # type: ignore[arg-type]

        if not self.db.exists():
            raise SessionNotFoundError()
        unchanged = self._unchanged(session)
        if unchanged is not None:
            return unchanged
        version = self.db.data_version()  # before the read: a commit after it is seen next time
        made = self.db.read(read)
        self._checked_at()[session] = (version, made)
        with self._maps_lock:
            self._maps.pop(session, None)
            self._maps[session] = made
            held = sum(kept.held for kept in self._maps.values())
            while len(self._maps) > 1 and (len(self._maps) > MAPS_KEPT or held > MAPS_BYTES):
                held -= self._maps.pop(next(iter(self._maps))).held
        return made

    def stat(self, transcript: TranscriptFile) -> SourceStat:
        """The session's view size and last change (OSError if the session is gone).

        Kept per session with the change key it was taken at, so a listing of many
        unchanged sessions costs two indexed counts each, not a map each.
        """
        session = transcript.location
        if not self.db.exists():
            raise FileNotFoundError("session gone")
        with self._maps_lock:
            kept = self._stats.get(session)
        if kept is not None:
            key = self.db.read(lambda conn: _key_if_present(conn, session))
            if key == kept[0]:
                return kept[1]
        try:
            made = self._map(transcript)
        except SessionNotFoundError:
            raise FileNotFoundError("session gone") from None
        stat = SessionView(self.db, made).stat()
        with self._maps_lock:
            self._stats[session] = (made.key, stat)
        return stat

    def entry_of_part(
        self, transcript: TranscriptFile, part_id: str, index: int
    ) -> tuple[str, int] | None:
        """(message id, index in the message's line) of the image `index` of a part of this
        session; None when no part of the session has that id (scrollback.opencode.naming).

        The images before it are counted in the message's data and in the message's
        earlier parts, each part streamed through the stripper (never held whole) and its
        count kept. An index past the part's own images names a later part's image,
        whose pin then differs (PIN_MISMATCH), or none (not found).
        """
        if transcript.source != OPENCODE or not self.db.exists():
            return None
        session = transcript.location

        def read(conn: sqlite3.Connection) -> tuple[str, bytes, list[int]] | None:
            found = rows(
                conn,
                "SELECT message_id FROM part WHERE id = ? AND session_id = ?",
                (part_id, session),
            )
            if not found:
                return None
            message = str(found[0][0])
            data = rows(conn, "SELECT data FROM message WHERE id = ?", (message,))
            earlier = rows(
                conn,
                "SELECT rowid FROM part WHERE message_id = ? AND id < ? ORDER BY id",
                (message, part_id),
            )
            text = data[0][0] if data else "{}"
            raw = text if isinstance(text, bytes) else str(text).encode()
            return message, raw, [int(row[0]) for row in earlier]

        found = self.db.read(read)
        if found is None:
            return None
        message, data, earlier = found
        try:
            before = images_in(orjson.loads(data))
        except orjson.JSONDecodeError:
            before = 0
        for rowid in earlier:
            before += self._images_of(rowid)
        return message, before + index

    def _images_of(self, rowid: int) -> int:
        """How many images a part holds: kept per (row, size), else counted streaming."""
        size = part_size(self.db, rowid)
        if size < 0:
            return 0
        with self._maps_lock:
            count = self._counts.get((rowid, size))
        if count is None:
            count = part_images(self.db, rowid, size)
            with self._maps_lock:
                if len(self._counts) >= COUNTS_KEPT:
                    self._counts.pop(next(iter(self._counts)))
                self._counts[(rowid, size)] = count
        return count

    def session_info(self, transcript: TranscriptFile) -> dict[str, Any] | None:
        """The session's info as `opencode export` writes it (scrollback.opencode.export)."""
        if transcript.source != OPENCODE or not self.db.exists():
            return None
        return self.db.read(lambda conn: session_info(conn, transcript.location))

    def key_of(self, transcript: TranscriptFile) -> str:
        """The session's name in the state store's indexes: `//opencode/<session id>`."""
        return KEY_PREFIX + transcript.location

    def open(self, transcript: TranscriptFile) -> ByteSource:
        """The session's view as its rows are now (SessionNotFoundError if it is gone)."""
        return SessionView(self.db, self._map(transcript))

    def open_listed(self, transcript: TranscriptFile) -> ByteSource:
        """The session's view: a database has no older version to read."""
        return self.open(transcript)

    def read_listed(self, transcript: TranscriptFile, work: Callable[[ByteSource], T]) -> T:
        """`work` on the session's view, closed after."""
        return read_closed(self.open(transcript), work)

    def version(self, opened: ByteSource, stat: SourceStat | None = None) -> FileVersion:
        """A view's version: its identity and its head (FileVersion.of)."""
        return FileVersion.of(opened, stat)


def _key_if_present(conn: sqlite3.Connection, session: str) -> ChangeKey | None:
    """The session's change key, None if the session is gone."""
    if not rows(conn, "SELECT 1 FROM session WHERE id = ?", (session,)):
        return None
    return change_key(conn, session)


def _always(transcript: TranscriptFile) -> bool:
    """A session is what the database says: there is no file to jail."""
    return True
