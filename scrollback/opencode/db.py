"""opencode's SQLite database, opened read-only, read in short transactions.

opencode (1.2 and later) keeps its sessions in one SQLite database in WAL
mode, written while we read. Every connection here is opened with a
`mode=ro` URI and `PRAGMA query_only`, so nothing we run can write, and a
busy timeout, so a reader waits briefly for a checkpoint or a migration
instead of failing at once. Reads are short: one statement, or one deferred
read transaction over a few statements (`read`), never held between calls, so
opencode's writes and checkpoints are never held up by a reader that went
quiet. Each thread has its own connection (SQLite connections are not shared
across threads).

A database that is locked past the timeout, mid-migration (a table or column
we read is missing) or unreadable raises `OpencodeUnavailableError`, which
the services answer UNAVAILABLE (reason TRANSCRIPTS_UNAVAILABLE): never a
partial read. The error text names no path.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from scrollback.objects import TranscriptsUnavailableError

T = TypeVar("T")

# How long a read waits for a lock held by opencode (a checkpoint, a migration).
BUSY_TIMEOUT_SECONDS = 2.0
# Pages a connection keeps (KiB): the parts a window reads again are read from it. No
# memory map: mapped pages of every part read would count in the server's resident memory,
# and a map of a file another process truncates faults the reader.
CACHE_KIB = 8 * 1024
# Idle connections kept for part readers (each with its page cache).
IDLE_READERS = 8
# The columns read from each table: one missing means a schema we do not know
# (a migration under way, or a release that changed it). `session.directory`, the
# project, is read where it is there (a release dropped it for a while).
REQUIRED_COLUMNS = {
    "session": frozenset({"id", "parent_id", "title", "time_created", "time_updated"}),
    "message": frozenset({"id", "session_id", "time_created", "time_updated", "data"}),
    "part": frozenset({"id", "message_id", "session_id", "time_updated", "data"}),
}


class OpencodeUnavailableError(TranscriptsUnavailableError):
    """The database is locked, mid-migration or unreadable: retry later."""

    def __init__(self, text: str = "the opencode database is unavailable; retry later") -> None:
        super().__init__(text)


class SessionChangedError(OpencodeUnavailableError):
    """A row changed size while a view of its session was read: read the session again."""

    def __init__(self) -> None:
        super().__init__("the opencode session changed while it was read; retry")


class OpencodeDatabase:
    """The database at `path`, read-only; a connection per thread, opened on first use."""

    def __init__(self, path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = path
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()
        self._serial = itertools.count(1)  # numbers this database's thread connections

    def exists(self) -> bool:
        """True if the database file is there (opencode has run at least once)."""
        return self.path.is_file()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._uri,
                uri=True,
                timeout=self._busy_timeout,
                isolation_level=None,  # autocommit: transactions are ours, and short
                check_same_thread=False,
            )
            _settings(conn)
            _check_schema(conn)
            self._local.conn = conn
            self._local.serial = next(self._serial)
        return conn

    def data_version(self) -> tuple[int, int]:
        """This thread's connection and its `PRAGMA data_version`: the same pair again means
        no other connection committed anything in between (OpencodeUnavailableError)."""
        try:
            conn = self._connection()
            version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self._drop()
            raise OpencodeUnavailableError() from None
        return int(self._local.serial), version

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` in one read transaction of this thread's connection, ended at once.

        Errors of the database (locked, missing table, corrupt) are
        OpencodeUnavailableError; the connection is dropped after one, so the
        next read checks the schema again.
        """
        try:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                return work(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error:
            self._drop()
            raise OpencodeUnavailableError() from None

    def take(self) -> sqlite3.Connection:
        """A read-only connection for the caller alone: an idle one, else a new one."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return self.connect()

    @contextlib.contextmanager
    def take_conn(self) -> Iterator[sqlite3.Connection]:
        """A connection taken for a `with` block, given back after it."""
        conn = self.take()
        try:
            yield conn
        finally:
            self.give_back(conn)

    def give_back(self, conn: sqlite3.Connection) -> None:
        """A connection taken and no longer used (no statement or blob open on it)."""
        with self._idle_lock:
            if len(self._idle) < IDLE_READERS:
                self._idle.append(conn)
                return
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def connect(self) -> sqlite3.Connection:
        """A new read-only connection of the caller's own (OpencodeUnavailableError if none)."""
        try:
            conn = sqlite3.connect(
                self._uri,
                uri=True,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            _settings(conn)
        except sqlite3.Error:
            raise OpencodeUnavailableError() from None
        return conn

    def _drop(self) -> None:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()


def _settings(conn: sqlite3.Connection) -> None:
    """A reader's settings: nothing it runs can write; pages read through a memory map."""
    conn.execute("PRAGMA query_only = ON")
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")


def has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    """True if the table has that column now."""
    return any(row[1] == column for row in conn.execute(f"PRAGMA table_info(`{table}`)"))


def _check_schema(conn: sqlite3.Connection) -> None:
    """OpencodeUnavailableError unless every table and column read is there."""
    for table, needed in REQUIRED_COLUMNS.items():
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info(`{table}`)")}
        if not needed <= columns:
            conn.close()
            raise OpencodeUnavailableError()


def rows(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """All rows of one statement."""
    return conn.execute(sql, params).fetchall()


class PartReader:
    """Reads of parts' `data` by incremental blob I/O, on a connection of its own while open
    (taken from the database's idle ones, given back on `close`).

    Only the bytes asked for are read, so a 100 MB part is never loaded
    whole. The handle of the part last read stays open while reads continue
    in it (reopening one at a large offset walks the part's overflow pages
    from its start again, so sequential reads of a reopened handle cost the
    square of the part's size); it is closed once a read reaches the part's
    end, when another part is read, and on `close`. An open handle holds a
    read transaction on this reader's own connection only.
    """

    def __init__(self, db: OpencodeDatabase) -> None:
        self._db = db
        self._conn: sqlite3.Connection | None = None
        self._blob: sqlite3.Blob | None = None
        self._rowid = -1

    def read(self, rowid: int, length: int, offset: int, expected: int) -> bytes:
        """Bytes [offset, offset + length) of a part's `data`; SessionChangedError if the
        value is no longer `expected` bytes long or the row is gone."""
        try:
            if self._blob is None or self._rowid != rowid:
                self._close_blob()
                if self._conn is None:
                    self._conn = self._db.take()
                blob = self._conn.blobopen("part", "data", rowid, readonly=True)
                self._blob, self._rowid = blob, rowid
                if len(blob) != expected:
                    self._close_blob()
                    raise SessionChangedError()
            blob = self._blob
            blob.seek(offset)
            data = blob.read(length)
            if offset + length >= expected:
                self._close_blob()
            return data
        except sqlite3.OperationalError as error:
            self.discard()
            if "no such rowid" in str(error):
                raise SessionChangedError() from None
            raise OpencodeUnavailableError() from None
        except sqlite3.Error:
            self.discard()
            raise OpencodeUnavailableError() from None

    def _close_blob(self) -> None:
        blob, self._blob, self._rowid = self._blob, None, -1
        if blob is not None:
            with contextlib.suppress(sqlite3.Error):
                blob.close()

    def close(self) -> None:
        """Close the open handle; the connection goes back to the database's idle ones."""
        self._close_blob()
        conn, self._conn = self._conn, None
        if conn is not None:
            self._db.give_back(conn)

    def discard(self) -> None:
        """Close the open handle and the connection (after an error of the database)."""
        self._close_blob()
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
