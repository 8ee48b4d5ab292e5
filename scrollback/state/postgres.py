"""The PostgreSQL state database: connection pools and versioned migrations.

Selected by `SCROLLBACK_DATABASE_URL` (or `--database-url`); without it the
services use the embedded SQLite database (scrollback.state.sqlite). The
migrations mirror SQLite's, version for version, in PostgreSQL's dialect and are
recorded in the same `schema_migrations` table. Several replicas may start at
once: the migrator takes a transaction-scoped advisory lock first, so exactly
one applies each version and the others wait, then find it applied.

Errors never carry the URL (it may hold a password): a database that cannot be
reached at start-up is `DatabaseUnavailableError` with a fixed text, and a
connection lost or a pool exhausted while serving is `StoreBusyError`, which
the services answer as UNAVAILABLE.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from scrollback.state.blob_access import digest_batches
from scrollback.state.sqlite import StoreBusyError, busy_timeout_ms, migration_statements
from scrollback.state.urls import DATABASE_URL_ENV, is_postgres_url

T = TypeVar("T")

# Advisory lock keys (one 64-bit key space per database).
MIGRATION_LOCK = 0x5C20_0001
ACCEPT_LOCK = 0x5C20_0002
GC_LOCK = 0x5C20_0003
INSIGHT_LOCK = 0x5C20_0017  # writers of the session insight index

# (version, SQL). Append only: never edit a released migration.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE blob (
            sha256      TEXT PRIMARY KEY,
            size_bytes  BIGINT NOT NULL,
            media_type  TEXT NOT NULL DEFAULT '',
            created_at  DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE accepted_message (
            seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            client_txn_id  TEXT NOT NULL UNIQUE,
            session_id     TEXT,
            chat_key       TEXT,
            text           TEXT NOT NULL,
            attachments    TEXT NOT NULL,
            content_digest TEXT NOT NULL,
            accepted_at    DOUBLE PRECISION NOT NULL,
            retired_at     DOUBLE PRECISION
        );
        CREATE INDEX accepted_message_session ON accepted_message (session_id, seq);
        CREATE INDEX accepted_message_chat_key ON accepted_message (chat_key, seq);
        CREATE TABLE blob_ref (
            sha256       TEXT NOT NULL REFERENCES blob (sha256),
            message_seq  BIGINT NOT NULL REFERENCES accepted_message (seq),
            PRIMARY KEY (message_seq, sha256)
        );
        CREATE INDEX blob_ref_sha256 ON blob_ref (sha256);
        CREATE TABLE chat_binding (
            chat_key    TEXT PRIMARY KEY,
            session_id  TEXT NOT NULL,
            bound_at    DOUBLE PRECISION NOT NULL
        );
        """,
    ),
    (
        2,
        """
        CREATE TABLE blob_owner (
            sha256      TEXT NOT NULL,
            principal   TEXT NOT NULL,
            created_at  DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (sha256, principal)
        );
        ALTER TABLE accepted_message ADD COLUMN accepted_by TEXT;
        CREATE INDEX accepted_message_accepted_by ON accepted_message (accepted_by, chat_key);
        """,
    ),
    (
        3,
        # Chat keys in their principal's namespace (see scrollback.state.sqlite).
        """
        ALTER TABLE chat_binding ADD COLUMN principal TEXT NOT NULL DEFAULT '';
        UPDATE chat_binding b SET principal = COALESCE((
            SELECT CASE WHEN COUNT(DISTINCT COALESCE(m.accepted_by, '')) = 1
                THEN MIN(COALESCE(m.accepted_by, '')) END
            FROM accepted_message m WHERE m.chat_key = b.chat_key), '');
        ALTER TABLE chat_binding ALTER COLUMN principal DROP DEFAULT;
        ALTER TABLE chat_binding DROP CONSTRAINT chat_binding_pkey;
        ALTER TABLE chat_binding ADD PRIMARY KEY (principal, chat_key);
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
            device          BIGINT NOT NULL,
            inode           BIGINT NOT NULL,
            head_len        BIGINT NOT NULL,
            head_hash       BIGINT NOT NULL,
            indexed_offset  BIGINT NOT NULL,
            photo_count     BIGINT NOT NULL,
            first_time_us   BIGINT,
            last_time_us    BIGINT,
            updated_at      DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (project_dir, session_id)
        );
        CREATE TABLE insight_entry_type (
            project_dir  TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            entry_type   TEXT NOT NULL,
            entry_count  BIGINT NOT NULL,
            PRIMARY KEY (project_dir, session_id, entry_type)
        );
        CREATE TABLE insight_message (
            project_dir            TEXT NOT NULL,
            session_id             TEXT NOT NULL,
            message_id             TEXT NOT NULL,
            model                  TEXT NOT NULL,
            input_tokens           BIGINT NOT NULL,
            output_tokens          BIGINT NOT NULL,
            cache_creation_tokens  BIGINT NOT NULL,
            cache_read_tokens      BIGINT NOT NULL,
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
            file_id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            file_key    TEXT NOT NULL UNIQUE,
            generation  BIGINT NOT NULL,
            dev         BIGINT NOT NULL,
            ino         BIGINT NOT NULL,
            head_len    INTEGER NOT NULL,
            head_hash   TEXT NOT NULL,
            covered     BIGINT NOT NULL,
            scanned     BIGINT NOT NULL,
            mark_len    INTEGER NOT NULL,
            mark_hash   TEXT NOT NULL,
            updated_at  DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE line_index_line (
            file_id      BIGINT NOT NULL REFERENCES line_index_file (file_id) ON DELETE CASCADE,
            line_offset  BIGINT NOT NULL,
            length       BIGINT NOT NULL,
            uuid         TEXT,
            images       INTEGER NOT NULL,
            PRIMARY KEY (file_id, line_offset)
        );
        CREATE INDEX line_index_line_uuid ON line_index_line (file_id, uuid)
        """,
    ),
    (
        6,
        # client_txn_id in its principal's namespace (see scrollback.state.sqlite).
        """
        UPDATE accepted_message SET accepted_by = '' WHERE accepted_by IS NULL;
        ALTER TABLE accepted_message ALTER COLUMN accepted_by SET DEFAULT '';
        ALTER TABLE accepted_message ALTER COLUMN accepted_by SET NOT NULL;
        ALTER TABLE accepted_message DROP CONSTRAINT accepted_message_client_txn_id_key;
        ALTER TABLE accepted_message ADD CONSTRAINT accepted_message_principal_txn
            UNIQUE (accepted_by, client_txn_id)
        """,
    ),
    (
        7,
        # Per-model totals of the insight index (see scrollback.state.sqlite).
        """
        CREATE TABLE insight_model (
            project_dir            TEXT NOT NULL,
            session_id             TEXT NOT NULL,
            model                  TEXT NOT NULL,
            input_tokens           BIGINT NOT NULL,
            output_tokens          BIGINT NOT NULL,
            cache_creation_tokens  BIGINT NOT NULL,
            cache_read_tokens      BIGINT NOT NULL,
            message_count          BIGINT NOT NULL,
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
        # An accepted message's public seq (see scrollback.state.sqlite).
        """
        ALTER TABLE accepted_message ADD COLUMN public_seq BIGINT;
        UPDATE accepted_message SET public_seq = seq;
        CREATE UNIQUE INDEX accepted_message_public_seq ON accepted_message (public_seq)
        """,
    ),
)

Pool = psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]]


class DatabaseUnavailableError(Exception):
    """The PostgreSQL database could not be reached or migrated (the URL is never shown)."""

    def __init__(self, reason: str = "cannot connect") -> None:
        super().__init__(
            f"PostgreSQL state database ({DATABASE_URL_ENV}): {reason}; check that it is reachable"
        )


def migrate(connection: psycopg.Connection[tuple[Any, ...]]) -> int:
    """Apply the migrations not yet applied, in one transaction; return the version.

    The transaction-scoped advisory lock comes first, so concurrent migrators
    serialize and each version is applied exactly once.
    """
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        applied = {
            int(row[0])
            for row in connection.execute("SELECT version FROM schema_migrations").fetchall()
        }
        for version, sql in MIGRATIONS:
            if version in applied:
                continue
            for statement in migration_statements(sql):
                connection.execute(statement)
            connection.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (%s, %s)",
                (version, time.time()),
            )
        row = connection.execute(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"
        ).fetchone()
    return int(row[0]) if row else 0


def _configure(connection: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Bound every lock wait like SQLite's busy timeout (a timeout is StoreBusyError)."""
    connection.execute(f"SET lock_timeout = {busy_timeout_ms():d}")
    connection.commit()


def open_pool(url: str, *, name: str, max_size: int = 8, connect_timeout: float = 10.0) -> Pool:
    """A connection pool on a migrated database; DatabaseUnavailableError if unreachable."""
    if not is_postgres_url(url):
        raise DatabaseUnavailableError("the URL must start with postgresql://")
    try:
        # One direct connection first: a refused or misconfigured database fails at
        # once (the pool would keep retrying), and the schema is migrated before
        # any pooled connection serves.
        with psycopg.connect(url, connect_timeout=max(1, int(connect_timeout))) as connection:
            migrate(connection)
    except psycopg.Error:
        raise DatabaseUnavailableError() from None
    pool: Pool = psycopg_pool.ConnectionPool(
        url,
        min_size=1,
        max_size=max(2, max_size),
        name=name,
        open=False,
        timeout=busy_timeout_ms() / 1000,
        kwargs={"connect_timeout": max(1, int(connect_timeout))},
        configure=_configure,
    )
    try:
        pool.open(wait=True, timeout=connect_timeout)
    except (psycopg.Error, psycopg_pool.PoolTimeout):
        pool.close()
        raise DatabaseUnavailableError() from None
    except BaseException:
        pool.close()
        raise
    return pool


@contextmanager
def unavailable_on_failure() -> Iterator[None]:
    """Turn a lost connection, an exhausted pool or a lock timeout into StoreBusyError."""
    try:
        yield
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
        raise StoreBusyError() from None


def transaction(pool: Pool, work: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
    """Run `work` in one transaction on a pooled connection (committed, or rolled back)."""
    with unavailable_on_failure(), pool.connection() as connection, connection.transaction():
        return work(connection)


def blob_owned_by(
    connection: psycopg.Connection[tuple[Any, ...]], digests: Sequence[str], principal: str
) -> set[str]:
    """Which of these digests `principal` uploaded (scrollback.state.blob_access's rule)."""
    found: set[str] = set()
    for batch in digest_batches(digests):
        rows = connection.execute(
            "SELECT sha256 FROM blob_owner WHERE principal = %s AND sha256 = ANY(%s)",
            (principal, batch),
        ).fetchall()
        found.update(str(r[0]) for r in rows)
    return found


def blob_referencing(
    connection: psycopg.Connection[tuple[Any, ...]], sha256: str
) -> list[tuple[str | None, str | None]]:
    """(session_id, accepted_by) of the accepted messages whose blob_ref names the blob."""
    rows = connection.execute(
        "SELECT DISTINCT m.session_id, m.accepted_by FROM blob_ref r"
        " JOIN accepted_message m ON m.seq = r.message_seq WHERE r.sha256 = %s LIMIT 1000",
        (sha256,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]
