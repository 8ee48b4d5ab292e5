"""Opening the state database and applying its versioned migrations.

Connections use WAL with `synchronous=FULL`, so a committed transaction is on
disk before the caller answers (docs/contract.md §7: recording it IS
acceptance). Each migration runs once, in its own transaction, and is recorded
in `schema_migrations`; migrations add tables, columns and indexes, and
rewrite existing rows only where a new rule needs them in a new shape.

Migration 2 (auth): `blob_owner` records who uploaded a blob (several
uploaders of the same bytes each own it) and `accepted_message.accepted_by`
who accepted a message (NULL without auth).

Migration 3 (tenants): a chat key lives in its principal's namespace.
`chat_binding` is keyed by (principal, chat_key), and `accepted_by` is never
NULL: the anonymous principal (no auth) is `''` (scrollback.server.auth.ANONYMOUS).
Existing rows migrate: a message's NULL `accepted_by` becomes `''`; a binding
(which recorded no principal) goes to the one principal whose messages used
its key, or to the anonymous principal when none or several did (those
principals bind again; nothing of one can land in another's namespace).

Migration 4 (insight): the session insight index, `insight_file`
(one row per transcript: its identity, how far it was read, photos, time
span), `insight_entry_type`, `insight_message` (one row per assistant
message.id, so repeated usage lines count once) and `insight_subagent_link`.
Migration 5 (line index, scrollback.state.line_index): `line_index_file`
(one row per indexed transcript: version and reach) and `line_index_line`
(offset, length, top-level uuid, image candidates of each complete line).
Self-contained: it creates only its own tables.
Migration 7 (insight): `insight_model` keeps each transcript's
usage per model (sums of its `insight_message` rows and their count), written
with them, so reading a session's totals reads a few rows instead of summing
one per message; filled from the existing `insight_message` rows.

Every wait on the database is bounded: the busy timeout
(`SCROLLBACK_STATE_BUSY_TIMEOUT_MS`, default 5000) ends a wait on another
writer's lock with `StoreBusyError`, which the services answer as UNAVAILABLE.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from scrollback.state.blob_access import digest_batches
from scrollback.state.errors import StoreBusyError

DATABASE_FILE_NAME = "scrollback.db"
BUSY_TIMEOUT_MS = 5000
BUSY_TIMEOUT_ENV = "SCROLLBACK_STATE_BUSY_TIMEOUT_MS"
T = TypeVar("T")


def busy_timeout_ms() -> int:
    """The configured busy timeout in milliseconds."""
    text = os.environ.get(BUSY_TIMEOUT_ENV, "")
    try:
        return max(1, int(text)) if text else BUSY_TIMEOUT_MS
    except ValueError:
        return BUSY_TIMEOUT_MS


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


@contextmanager
def busy_as_unavailable() -> Iterator[None]:
    """Turn SQLite's 'database is locked' into StoreBusyError."""
    try:
        yield
    except sqlite3.OperationalError as error:
        if _is_busy(error):
            raise StoreBusyError() from None
        raise


def write_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work` in one `BEGIN IMMEDIATE` transaction; busy -> StoreBusyError."""
    with busy_as_unavailable():
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = work(connection)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return result


# (version, SQL). Append only: never edit a released migration.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE blob (
            sha256      TEXT PRIMARY KEY,
            size_bytes  INTEGER NOT NULL,
            media_type  TEXT NOT NULL DEFAULT '',
            created_at  REAL NOT NULL
        );
        CREATE TABLE accepted_message (
            seq            INTEGER PRIMARY KEY AUTOINCREMENT,
            client_txn_id  TEXT NOT NULL UNIQUE,
            session_id     TEXT,
            chat_key       TEXT,
            text           TEXT NOT NULL,
            attachments    TEXT NOT NULL,
            content_digest TEXT NOT NULL,
            accepted_at    REAL NOT NULL,
            retired_at     REAL
        );
        CREATE INDEX accepted_message_session ON accepted_message (session_id, seq);
        CREATE INDEX accepted_message_chat_key ON accepted_message (chat_key, seq);
        CREATE TABLE blob_ref (
            sha256       TEXT NOT NULL REFERENCES blob (sha256),
            message_seq  INTEGER NOT NULL REFERENCES accepted_message (seq),
            PRIMARY KEY (message_seq, sha256)
        );
        CREATE INDEX blob_ref_sha256 ON blob_ref (sha256);
        CREATE TABLE chat_binding (
            chat_key    TEXT PRIMARY KEY,
            session_id  TEXT NOT NULL,
            bound_at    REAL NOT NULL
        );
        """,
    ),
    (
        2,
        """
        CREATE TABLE blob_owner (
            sha256      TEXT NOT NULL,
            principal   TEXT NOT NULL,
            created_at  REAL NOT NULL,
            PRIMARY KEY (sha256, principal)
        );
        ALTER TABLE accepted_message ADD COLUMN accepted_by TEXT;
        CREATE INDEX accepted_message_accepted_by ON accepted_message (accepted_by, chat_key);
        """,
    ),
    (
        3,
        """
        CREATE TABLE chat_binding_v3 (
            principal   TEXT NOT NULL,
            chat_key    TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            bound_at    REAL NOT NULL,
            PRIMARY KEY (principal, chat_key)
        );
        INSERT INTO chat_binding_v3 (principal, chat_key, session_id, bound_at)
            SELECT COALESCE((
                SELECT CASE WHEN COUNT(DISTINCT COALESCE(m.accepted_by, '')) = 1
                    THEN MIN(COALESCE(m.accepted_by, '')) END
                FROM accepted_message m WHERE m.chat_key = b.chat_key), ''),
                b.chat_key, b.session_id, b.bound_at
            FROM chat_binding b;
        DROP TABLE chat_binding;
        ALTER TABLE chat_binding_v3 RENAME TO chat_binding;
        UPDATE accepted_message SET accepted_by = '' WHERE accepted_by IS NULL
        """,
    ),
    (
        4,
        # The session insight index (history_service.insight): derived from the
        # transcripts, so a lost or stale row is rebuilt, never wrong.
        """
        CREATE TABLE insight_file (
            project_dir     TEXT NOT NULL,
            session_id      TEXT NOT NULL,
            device          INTEGER NOT NULL,
            inode           INTEGER NOT NULL,
            head_len        INTEGER NOT NULL,
            head_hash       INTEGER NOT NULL,
            indexed_offset  INTEGER NOT NULL,
            photo_count     INTEGER NOT NULL,
            first_time_us   INTEGER,
            last_time_us    INTEGER,
            updated_at      REAL NOT NULL,
            PRIMARY KEY (project_dir, session_id)
        );
        CREATE TABLE insight_entry_type (
            project_dir  TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            entry_type   TEXT NOT NULL,
            entry_count  INTEGER NOT NULL,
            PRIMARY KEY (project_dir, session_id, entry_type)
        );
        CREATE TABLE insight_message (
            project_dir            TEXT NOT NULL,
            session_id             TEXT NOT NULL,
            message_id             TEXT NOT NULL,
            model                  TEXT NOT NULL,
            input_tokens           INTEGER NOT NULL,
            output_tokens          INTEGER NOT NULL,
            cache_creation_tokens  INTEGER NOT NULL,
            cache_read_tokens      INTEGER NOT NULL,
            PRIMARY KEY (project_dir, session_id, message_id)
        );
        CREATE TABLE insight_subagent_link (
            project_dir        TEXT NOT NULL,
            session_id         TEXT NOT NULL,
            tool_use_id        TEXT NOT NULL,
            agent_session_id   TEXT NOT NULL,
            PRIMARY KEY (project_dir, session_id, tool_use_id)
        );
        CREATE INDEX insight_subagent_link_agent ON insight_subagent_link (project_dir, agent_session_id)
        """,
    ),
    (
        5,
        # Line index (scrollback.state.line_index); touches no other table.
        """
        CREATE TABLE line_index_file (
            file_id     INTEGER PRIMARY KEY,
            file_key    TEXT NOT NULL UNIQUE,
            generation  INTEGER NOT NULL,
            dev         INTEGER NOT NULL,
            ino         INTEGER NOT NULL,
            head_len    INTEGER NOT NULL,
            head_hash   TEXT NOT NULL,
            covered     INTEGER NOT NULL,
            scanned     INTEGER NOT NULL,
            mark_len    INTEGER NOT NULL,
            mark_hash   TEXT NOT NULL,
            updated_at  REAL NOT NULL
        );
        CREATE TABLE line_index_line (
            file_id      INTEGER NOT NULL REFERENCES line_index_file (file_id) ON DELETE CASCADE,
            line_offset  INTEGER NOT NULL,
            length       INTEGER NOT NULL,
            uuid         TEXT,
            images       INTEGER NOT NULL,
            PRIMARY KEY (file_id, line_offset)
        ) WITHOUT ROWID;
        CREATE INDEX line_index_line_uuid ON line_index_line (file_id, uuid)
        """,
    ),
    (
        6,
        # client_txn_id in its principal's namespace (docs/contract.md §7): the
        # UNIQUE constraint moves from (client_txn_id) to (accepted_by,
        # client_txn_id), which SQLite can only do by rebuilding the table.
        # blob_ref, which references it, is set aside and rebuilt as it was
        # (dropping a referenced parent would count as deleting its rows), and
        # the AUTOINCREMENT high-water mark is carried over so that no seq is
        # ever handed out twice.
        """
        CREATE TABLE accepted_message_v6 (
            seq            INTEGER PRIMARY KEY AUTOINCREMENT,
            client_txn_id  TEXT NOT NULL,
            session_id     TEXT,
            chat_key       TEXT,
            text           TEXT NOT NULL,
            attachments    TEXT NOT NULL,
            content_digest TEXT NOT NULL,
            accepted_at    REAL NOT NULL,
            retired_at     REAL,
            accepted_by    TEXT NOT NULL DEFAULT '',
            UNIQUE (accepted_by, client_txn_id)
        );
        INSERT INTO accepted_message_v6 (seq, client_txn_id, session_id, chat_key, text,
                attachments, content_digest, accepted_at, retired_at, accepted_by)
            SELECT seq, client_txn_id, session_id, chat_key, text, attachments,
                content_digest, accepted_at, retired_at, COALESCE(accepted_by, '')
            FROM accepted_message;
        DELETE FROM sqlite_sequence WHERE name = 'accepted_message_v6';
        INSERT INTO sqlite_sequence (name, seq)
            SELECT 'accepted_message_v6', seq FROM sqlite_sequence WHERE name = 'accepted_message';
        CREATE TEMP TABLE blob_ref_v6 AS SELECT sha256, message_seq FROM blob_ref;
        DROP TABLE blob_ref;
        DROP TABLE accepted_message;
        ALTER TABLE accepted_message_v6 RENAME TO accepted_message;
        CREATE TABLE blob_ref (
            sha256       TEXT NOT NULL REFERENCES blob (sha256),
            message_seq  INTEGER NOT NULL REFERENCES accepted_message (seq),
            PRIMARY KEY (message_seq, sha256)
        );
        CREATE INDEX blob_ref_sha256 ON blob_ref (sha256);
        INSERT INTO blob_ref (sha256, message_seq) SELECT sha256, message_seq FROM blob_ref_v6;
        DROP TABLE temp.blob_ref_v6;
        CREATE INDEX accepted_message_session ON accepted_message (session_id, seq);
        CREATE INDEX accepted_message_chat_key ON accepted_message (chat_key, seq);
        CREATE INDEX accepted_message_accepted_by ON accepted_message (accepted_by, chat_key)
        """,
    ),
    (
        7,
        # Per-model totals of the insight index, kept beside insight_message
        # (history_service/store/insight.py writes both in one transaction).
        """
        CREATE TABLE insight_model (
            project_dir            TEXT NOT NULL,
            session_id             TEXT NOT NULL,
            model                  TEXT NOT NULL,
            input_tokens           INTEGER NOT NULL,
            output_tokens          INTEGER NOT NULL,
            cache_creation_tokens  INTEGER NOT NULL,
            cache_read_tokens      INTEGER NOT NULL,
            message_count          INTEGER NOT NULL,
            PRIMARY KEY (project_dir, session_id, model)
        );
        INSERT INTO insight_model (project_dir, session_id, model, input_tokens, output_tokens,
                cache_creation_tokens, cache_read_tokens, message_count)
            SELECT project_dir, session_id, model, SUM(input_tokens), SUM(output_tokens),
                SUM(cache_creation_tokens), SUM(cache_read_tokens), COUNT(*)
            FROM insight_message GROUP BY project_dir, session_id, model
        """,
    ),
    (
        8,
        # What callers see as an accepted message's seq (history_service.store.records
        # next_public_seq): the acceptance time in microseconds, not the count of every
        # principal's messages. Rows accepted before keep their seq, which is below any
        # time in microseconds, so the order stays the same.
        """
        ALTER TABLE accepted_message ADD COLUMN public_seq INTEGER;
        UPDATE accepted_message SET public_seq = seq;
        CREATE UNIQUE INDEX accepted_message_public_seq ON accepted_message (public_seq)
        """,
    ),
)


def blob_owned_by(
    connection: sqlite3.Connection, digests: Sequence[str], principal: str
) -> set[str]:
    """Which of these digests `principal` uploaded (the read rule's first half).

    Shared by the media and history stores (scrollback.state.blob_access).
    """
    found: set[str] = set()
    with busy_as_unavailable():
        for batch in digest_batches(digests):
            marks = ",".join("?" * len(batch))
            rows = connection.execute(
                f"SELECT sha256 FROM blob_owner WHERE principal = ? AND sha256 IN ({marks})",
                [principal, *batch],
            ).fetchall()
            found.update(r[0] for r in rows)
    return found


def blob_referencing(
    connection: sqlite3.Connection, sha256: str
) -> list[tuple[str | None, str | None]]:
    """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
    with busy_as_unavailable():
        rows = connection.execute(
            "SELECT DISTINCT m.session_id, m.accepted_by FROM blob_ref r"
            " JOIN accepted_message m ON m.seq = r.message_seq WHERE r.sha256 = ? LIMIT 1000",
            (sha256,),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def migration_statements(sql: str) -> Iterator[str]:
    """The statements of one migration's SQL (split on `;`, blanks dropped).

    Shared with the PostgreSQL migrations (scrollback.state.postgres).
    """
    for statement in (s.strip() for s in sql.split(";")):
        if statement:
            yield statement


def database_path(state_dir: Path) -> Path:
    """The state database's path inside the state dir."""
    return state_dir / DATABASE_FILE_NAME


def use_wal(connection: sqlite3.Connection, timeout_seconds: float) -> None:
    """Put the database in WAL mode, waiting out others doing the same.

    Switching a new file to WAL takes an exclusive lock for which SQLite's busy
    handler does not wait, so processes opening one new database at the same
    moment (worker processes starting together) would see "database is
    locked"; this retries until `timeout_seconds`.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def connect(state_dir: Path) -> sqlite3.Connection:
    """Open (creating if needed) the state database, migrated to the latest version.

    The connection is in autocommit mode (`isolation_level=None`): callers open
    transactions explicitly with `BEGIN IMMEDIATE` so that writers serialize.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    timeout_ms = busy_timeout_ms()
    connection = sqlite3.connect(
        database_path(state_dir),
        isolation_level=None,
        check_same_thread=False,
        timeout=timeout_ms / 1000,
    )
    use_wal(connection, timeout_ms / 1000)
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("PRAGMA foreign_keys=ON")
    connection.execute(f"PRAGMA busy_timeout={timeout_ms}")
    migrate(connection)
    return connection


def migrate(connection: sqlite3.Connection) -> int:
    """Apply the migrations not yet applied; return the resulting version."""
    connection.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    for version, sql in MIGRATIONS:
        connection.execute("BEGIN IMMEDIATE")
        try:
            applied = connection.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
            ).fetchone()
            if applied is None:
                for statement in migration_statements(sql):
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, time.time()),
                )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    row = connection.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)
