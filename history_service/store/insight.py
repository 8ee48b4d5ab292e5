"""The insight index's two backends (history_service.insight_model.InsightStore): SQLite and PostgreSQL.

Both run the same SQL (only the parameter mark differs) on the shared state
database's migration-4 tables. A write is one transaction that first checks
the stored state is still the one the writer started from (compare and set),
so two writers of one transcript (threads, or replicas on PostgreSQL) never
count the same lines twice: the loser writes nothing and reads again.
A message.id already indexed takes the field-wise maximum of the usage it
had and the new line's (history_service.insight: the final usage of a
streamed message). The per-model totals (`insight_model`, migration 7) move
in the same transaction by exactly what the `insight_message` rows gained, so
reading a session's totals reads one row per model, never one per message. On PostgreSQL every write also takes one
transaction-scoped advisory lock (INSIGHT_LOCK), as SQLite's BEGIN IMMEDIATE
serializes writers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from history_service.insight_model import IndexDelta, IndexState, Insight, ModelTotals, Usage
from scrollback.linefile import FileIdentity, FileVersion
from scrollback.state.sqlite import busy_as_unavailable, connect, write_transaction

if TYPE_CHECKING:
    from scrollback.state.postgres import Pool

T = TypeVar("T")
_SIGN = 1 << 63
# Message ids per `IN (...)` lookup of the rows a batch may update.
_LOOKUP_CHUNK = 500
_USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")


def _signed(value: int) -> int:
    """A 64-bit unsigned hash as the signed integer both databases store."""
    return value - (1 << 64) if value >= _SIGN else value


def _unsigned(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


class _SqlInsightStore:
    """The SQL both backends share; `_mark` is the parameter placeholder."""

    _mark = "?"
    _greatest = "MAX"  # SQLite's two-argument max() is PostgreSQL's GREATEST()

    def _sql(self, text: str) -> str:
        return text.replace("?", self._mark)

    def _read(self, work: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _write(self, work: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def state(self, project_dir: str, session_id: str) -> IndexState | None:
        """How far that transcript was indexed, or None if never."""
        return self._read(lambda c: self._state(c, project_dir, session_id))

    def _state(self, connection: Any, project_dir: str, session_id: str) -> IndexState | None:
        row = connection.execute(
            self._sql(
                "SELECT device, inode, head_len, head_hash, indexed_offset FROM insight_file"
                " WHERE project_dir = ? AND session_id = ?"
            ),
            (project_dir, session_id),
        ).fetchone()
        if row is None:
            return None
        device, inode, head_len, head_hash, offset = (int(v) for v in row)
        # The identity's size is the indexed offset: shrinking below it is a rewrite.
        return IndexState(
            FileIdentity(FileVersion(device, inode, head_len, _unsigned(head_hash)), offset), offset
        )

    def apply(
        self,
        project_dir: str,
        session_id: str,
        base: IndexState | None,
        reset: bool,
        delta: IndexDelta,
        new_state: IndexState,
    ) -> bool:
        """Add a delta and move the state, if the stored state is still `base`."""
        key = (project_dir, session_id)

        def work(connection: Any) -> bool:
            self._lock(connection)
            stored = self._state(connection, *key)
            if stored != base:
                return False
            if reset or base is None:
                self._clear(connection, key)
                photos, first, last = 0, None, None
                known: dict[str, tuple[str, Usage]] = {}
            else:
                known = self._known_messages(connection, key, list(delta.messages))
                row = connection.execute(
                    self._sql(
                        "SELECT photo_count, first_time_us, last_time_us FROM insight_file"
                        " WHERE project_dir = ? AND session_id = ?"
                    ),
                    key,
                ).fetchone()
                photos, first, last = int(row[0]), row[1], row[2]
            photos += delta.photos
            first = _pick(min, first, delta.first_time_us)
            last = _pick(max, last, delta.last_time_us)
            self._put_file(connection, key, new_state, photos, first, last)
            self._add_rows(connection, key, delta, known)
            return True

        return self._write(work)

    def _clear(self, connection: Any, key: tuple[str, str]) -> None:
        """Delete every row of a transcript's index (it is read again from its start)."""
        for table in (
            "insight_entry_type",
            "insight_message",
            "insight_model",
            "insight_subagent_link",
        ):
            connection.execute(
                self._sql(f"DELETE FROM {table} WHERE project_dir = ? AND session_id = ?"),
                key,
            )
        connection.execute(
            self._sql("DELETE FROM insight_file WHERE project_dir = ? AND session_id = ?"),
            key,
        )

    def _put_file(
        self,
        connection: Any,
        key: tuple[str, str],
        new_state: IndexState,
        photos: int,
        first: int | None,
        last: int | None,
    ) -> None:
        """Write a transcript's file row: where its index stands and its file-wide totals."""
        identity = new_state.identity
        connection.execute(
            self._sql(
                "INSERT INTO insight_file (project_dir, session_id, device, inode, head_len,"
                " head_hash, indexed_offset, photo_count, first_time_us, last_time_us, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)"
                " ON CONFLICT (project_dir, session_id) DO UPDATE SET device = excluded.device,"
                " inode = excluded.inode, head_len = excluded.head_len,"
                " head_hash = excluded.head_hash, indexed_offset = excluded.indexed_offset,"
                " photo_count = excluded.photo_count, first_time_us = excluded.first_time_us,"
                " last_time_us = excluded.last_time_us"
            ),
            (
                *key,
                identity.version.dev,
                identity.version.ino,
                identity.version.head_len,
                _signed(identity.version.head_hash),
                new_state.offset,
                photos,
                first,
                last,
            ),
        )

    def _add_rows(
        self,
        connection: Any,
        key: tuple[str, str],
        delta: IndexDelta,
        known: dict[str, tuple[str, Usage]],
    ) -> None:
        """Add a delta's entry counts, messages, model totals and sub-agent links."""
        self._many(
            connection,
            "INSERT INTO insight_entry_type (project_dir, session_id, entry_type, entry_count)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (project_dir, session_id, entry_type)"
            " DO UPDATE SET entry_count = insight_entry_type.entry_count + excluded.entry_count",
            [(*key, kind, count) for kind, count in delta.entry_counts.items()],
        )
        self._many(
            connection,
            "INSERT INTO insight_message (project_dir, session_id, message_id, model,"
            " input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (project_dir, session_id, message_id)"
            " DO UPDATE SET "
            + ", ".join(
                f"{c} = {self._greatest}(insight_message.{c}, excluded.{c})"
                for c in (
                    "input_tokens",
                    "output_tokens",
                    "cache_creation_tokens",
                    "cache_read_tokens",
                )
            ),
            [
                (
                    *key,
                    mid,
                    m.model,
                    m.usage.input,
                    m.usage.output,
                    m.usage.cache_creation,
                    m.usage.cache_read,
                )
                for mid, m in delta.messages.items()
            ],
        )
        self._many(
            connection,
            "INSERT INTO insight_model (project_dir, session_id, model, input_tokens,"
            " output_tokens, cache_creation_tokens, cache_read_tokens, message_count)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (project_dir, session_id, model)"
            " DO UPDATE SET "
            + ", ".join(
                f"{c} = insight_model.{c} + excluded.{c}"
                for c in (*_USAGE_COLUMNS, "message_count")
            ),
            [
                (*key, model, u.input, u.output, u.cache_creation, u.cache_read, count)
                for model, (u, count) in _model_gains(delta, known).items()
            ],
        )
        self._many(
            connection,
            "INSERT INTO insight_subagent_link (project_dir, session_id, tool_use_id,"
            " agent_session_id) VALUES (?, ?, ?, ?) ON CONFLICT (project_dir, session_id,"
            " tool_use_id) DO UPDATE SET agent_session_id = excluded.agent_session_id",
            [(*key, tool, agent) for tool, agent in delta.links.items()],
        )

    def _known_messages(
        self, connection: Any, key: tuple[str, str], message_ids: list[str]
    ) -> dict[str, tuple[str, Usage]]:
        """(model, usage) of the ids among `message_ids` already indexed for `key`."""
        known: dict[str, tuple[str, Usage]] = {}
        for start in range(0, len(message_ids), _LOOKUP_CHUNK):
            chunk = message_ids[start : start + _LOOKUP_CHUNK]
            rows = connection.execute(
                self._sql(
                    f"SELECT message_id, model, {', '.join(_USAGE_COLUMNS)} FROM insight_message"
                    " WHERE project_dir = ? AND session_id = ?"
                    f" AND message_id IN ({', '.join('?' * len(chunk))})"
                ),
                (*key, *chunk),
            ).fetchall()
            for row in rows:
                known[str(row[0])] = (str(row[1]), Usage(*(int(v) for v in row[2:6])))
        return known

    def _lock(self, connection: Any) -> None:
        """Serialize writers (SQLite's BEGIN IMMEDIATE already does)."""

    def _many(self, connection: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            connection.executemany(self._sql(sql), rows)

    def insight(self, project_dir: str, session_id: str) -> Insight | None:
        """The indexed totals of one transcript, or None if never indexed."""
        key = (project_dir, session_id)

        def work(connection: Any) -> Insight | None:
            row = connection.execute(
                self._sql(
                    "SELECT photo_count, first_time_us, last_time_us, indexed_offset"
                    " FROM insight_file WHERE project_dir = ? AND session_id = ?"
                ),
                key,
            ).fetchone()
            if row is None:
                return None
            counts = connection.execute(
                self._sql(
                    "SELECT entry_type, entry_count FROM insight_entry_type"
                    " WHERE project_dir = ? AND session_id = ?"
                ),
                key,
            ).fetchall()
            models = connection.execute(
                self._sql(
                    f"SELECT model, {', '.join(_USAGE_COLUMNS)}, message_count FROM insight_model"
                    " WHERE project_dir = ? AND session_id = ?"
                ),
                key,
            ).fetchall()
            return Insight(
                {str(k): int(n) for k, n in counts},
                int(row[0]),
                None if row[1] is None else int(row[1]),
                None if row[2] is None else int(row[2]),
                tuple(
                    sorted(
                        (
                            ModelTotals(
                                str(m[0]),
                                Usage(int(m[1]), int(m[2]), int(m[3]), int(m[4])),
                                int(m[5]),
                            )
                            for m in models
                        ),
                        key=lambda t: (-t.usage.output, t.model),
                    )
                ),
                int(row[3]),
            )

        return self._read(work)

    def last_activity(self, project_dir: str) -> dict[tuple[str, str], tuple[int, int]]:
        """(project_dir, session_id) -> (indexed offset, last entry time in microseconds) of
        every indexed transcript that has a timestamped entry (of one project, if named)."""
        sql = (
            "SELECT project_dir, session_id, indexed_offset, last_time_us FROM insight_file"
            " WHERE last_time_us IS NOT NULL"
        )
        params: tuple[str, ...] = ()
        if project_dir:
            sql, params = sql + " AND project_dir = ?", (project_dir,)
        rows = self._read(lambda c: c.execute(self._sql(sql), params).fetchall())
        return {(str(p), str(s)): (int(o), int(t)) for p, s, o, t in rows}

    def links(self, project_dir: str, session_id: str) -> dict[str, str]:
        """tool_use id -> sub-agent session id of one parent transcript."""
        rows = self._read(
            lambda c: c.execute(
                self._sql(
                    "SELECT tool_use_id, agent_session_id FROM insight_subagent_link"
                    " WHERE project_dir = ? AND session_id = ?"
                ),
                (project_dir, session_id),
            ).fetchall()
        )
        return {str(t): str(a) for t, a in rows}

    def parent_of(self, project_dir: str, agent_session_id: str) -> tuple[str, str] | None:
        """(parent session id, tool_use id) of a sub-agent, if a link names it."""
        row = self._read(
            lambda c: c.execute(
                self._sql(
                    "SELECT session_id, tool_use_id FROM insight_subagent_link"
                    " WHERE project_dir = ? AND agent_session_id = ?"
                    " ORDER BY session_id, tool_use_id LIMIT 1"
                ),
                (project_dir, agent_session_id),
            ).fetchone()
        )
        return None if row is None else (str(row[0]), str(row[1]))


def _model_gains(
    delta: IndexDelta, known: dict[str, tuple[str, Usage]]
) -> dict[str, tuple[Usage, int]]:
    """What each model's totals gain from a delta: (usage, new messages).

    A new message.id adds its usage and one message; one already indexed keeps
    its first model and adds only what the field-wise maximum raised (the
    insight_message upsert's own rule), so the totals always equal the sums of
    the message rows.
    """
    gains: dict[str, tuple[Usage, int]] = {}
    for message_id, message in delta.messages.items():
        seen = known.get(message_id)
        if seen is None:
            model, gained, count = message.model, message.usage, 1
        else:
            model, old = seen
            new = message.usage
            gained = Usage(
                max(old.input, new.input) - old.input,
                max(old.output, new.output) - old.output,
                max(old.cache_creation, new.cache_creation) - old.cache_creation,
                max(old.cache_read, new.cache_read) - old.cache_read,
            )
            count = 0
        usage, messages = gains.get(model, (Usage(), 0))
        gains[model] = (usage + gained, messages + count)
    return gains


def _pick(choose: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else choose(int(a), b)


class SqliteInsightStore(_SqlInsightStore):
    """The insight index on the shared SQLite state database (its own connection)."""

    def __init__(self, state_dir: Path) -> None:
        self._connection = connect(state_dir)
        self._guard = threading.Lock()

    def _read(self, work: Callable[[Any], T]) -> T:
        with self._guard, busy_as_unavailable():
            return work(self._connection)

    def _write(self, work: Callable[[Any], T]) -> T:
        with self._guard:
            return write_transaction(self._connection, work)

    def close(self) -> None:
        """Close the connection."""
        with self._guard:
            self._connection.close()


class PostgresInsightStore(_SqlInsightStore):
    """The insight index on the PostgreSQL state database (a pooled connection per call)."""

    _mark = "%s"
    _greatest = "GREATEST"

    def __init__(self, pool: Pool) -> None:
        # Imported here: psycopg is loaded by the PostgreSQL backend only, not by every
        # process that indexes insight on SQLite.
        from scrollback.state.postgres import INSIGHT_LOCK, transaction

        self._pool = pool
        self._transaction = transaction
        self._lock_key = INSIGHT_LOCK

    def _read(self, work: Callable[[Any], T]) -> T:
        return self._transaction(self._pool, work)

    def _write(self, work: Callable[[Any], T]) -> T:
        return self._transaction(self._pool, work)

    def _lock(self, connection: Any) -> None:
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))

    def _many(self, connection: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            with connection.cursor() as cursor:
                cursor.executemany(self._sql(sql), rows)

    def close(self) -> None:
        """The pool belongs to the accepted-message store, which closes it."""
