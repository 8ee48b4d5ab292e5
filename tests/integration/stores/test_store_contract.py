"""ONE contract for both state backends: every test runs on SQLite and on PostgreSQL.

Each Protocol method of AcceptedMessageStore and BlobMetadataStore is
exercised with the same expectations on both backends, so they cannot
drift: accept idempotency and conflicts, the blob check and the blob_ref rows
of the same transaction, ageing (which releases blob_ref rows), chat-key
binding, pending listing, since/last_seq, publish/owned_by/referencing/
existing, the collection rules, and a race of two "replicas" (two store
instances, two connections) accepting the same client_txn_id. The tenant
rules too: chat keys in their principal's namespace, attachments limited to
readable blobs, per-caller `existed` on publish, txn ids per principal, a
public seq that tells no caller how many messages the others sent, and
migrations 3, 6 and 8 of existing rows.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import psycopg
import pytest

from history_service.accept import AcceptedRecord, AcceptRequest, AttachmentSpec
from history_service.errors import BlobMissingError, ChatKeyBoundError, TxnConflictError
from history_service.store.base import AcceptedMessageStore
from history_service.store.postgres import PostgresAcceptedMessageStore
from history_service.store.sqlite import SqliteAcceptedMessageStore
from media_service.store.base import BlobMetadataStore, BlobRow
from media_service.store.postgres import PostgresBlobMetadataStore
from media_service.store.sqlite import SqliteBlobMetadataStore
from scrollback.principals import ANONYMOUS as ANON
from scrollback.state import postgres as pg_state
from scrollback.state import sqlite as sqlite_state
from scrollback.state.postgres import DatabaseUnavailableError, Pool, open_pool

KEEP, TTL, T0 = 2, 60.0, 1_000_000.0


@dataclass
class Backend:
    """One backend's two stores, a settable clock and a way to open another 'replica'."""

    name: str
    history: AcceptedMessageStore
    media: BlobMetadataStore
    now: list[float]
    replica: Callable[[], tuple[AcceptedMessageStore, BlobMetadataStore]]
    closers: list[Callable[[], None]] = field(default_factory=list)

    def clock(self) -> float:
        return self.now[0]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    now = [T0]
    closers: list[Callable[[], None]] = []
    if request.param == "sqlite":

        def replica() -> tuple[AcceptedMessageStore, BlobMetadataStore]:
            history = SqliteAcceptedMessageStore(
                tmp_path, keep=KEEP, ttl_seconds=TTL, clock=lambda: now[0]
            )
            media = SqliteBlobMetadataStore(tmp_path)
            closers.extend([history.close, media.close])
            return history, media

    else:
        url: str = request.getfixturevalue("pg_url")

        def replica() -> tuple[AcceptedMessageStore, BlobMetadataStore]:
            pool: Pool = open_pool(url, name="contract", max_size=4)
            closers.append(pool.close)
            history = PostgresAcceptedMessageStore(
                pool, keep=KEEP, ttl_seconds=TTL, clock=lambda: now[0], owns_pool=False
            )
            return history, PostgresBlobMetadataStore(pool, owns_pool=False)

    history, media = replica()
    yield Backend(request.param, history, media, now, replica, closers)
    for close in reversed(closers):
        close()


def _request(
    txn: str, text: str = "hi", *, session: str = "s1", key: str = "", blobs: tuple[str, ...] = ()
) -> AcceptRequest:
    specs = tuple(AttachmentSpec(f"media:{sha}", f"{sha[:6]}.png", "image/png") for sha in blobs)
    return AcceptRequest(txn, "" if key else session, key, text, specs)


def _accept(
    store: AcceptedMessageStore,
    request: AcceptRequest,
    principal: str = ANON,
    readable: set[str] | None = None,
) -> tuple[AcceptedRecord, bool]:
    """Accept as `principal`; by default every attachment counts as readable."""
    if readable is None:
        readable = {a.sha256 for a in request.attachments}
    return store.accept(principal, request, readable)


def _sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def _publish(
    backend: Backend, label: str, *, at: float | None = None, owner: str | None = None
) -> tuple[str, bool, list[str]]:
    sha = _sha(label)
    calls: list[str] = []
    row = BlobRow(sha, len(label), "image/png", backend.clock() if at is None else at)
    existed = backend.media.publish(row, lambda: calls.append(sha), owner)
    return sha, existed, calls


def test_accept_is_idempotent_and_conflicts_on_other_content(backend: Backend) -> None:
    assert backend.history.last_seq() == 0
    record, replayed = _accept(backend.history, _request("t1"))
    assert not replayed and record.seq > 0 and record.session_id == "s1"
    again, replayed = _accept(backend.history, _request("t1"))
    assert replayed and again == record
    with pytest.raises(TxnConflictError):
        _accept(backend.history, _request("t1", "other text"))
    assert backend.history.last_seq() == record.seq


def test_a_callers_seq_tells_nothing_of_other_principals_messages(backend: Backend) -> None:
    """The seq callers see is the acceptance time in microseconds, not a count (§7).

    With one counter for every principal, alice's two seqs would be 51 apart,
    telling her bob sent 50 messages in between. Her second seq is the same
    whether bob sent none or fifty.
    """
    store = backend.history
    first, _ = _accept(store, _request("a1", "one", session="sa"), "alice")
    assert first.public_seq == int(T0 * 1_000_000)
    for n in range(50):
        backend.now[0] = T0 + 0.5 + n / 1000
        _accept(store, _request(f"b{n}", f"bob {n}", session="sb"), "bob")
    backend.now[0] = T0 + 1.0
    second, _ = _accept(store, _request("a2", "two", session="sa"), "alice")
    assert second.public_seq - first.public_seq == 1_000_000
    # The order of every acceptance is kept, even when the clock stands still or goes back.
    backend.now[0] = T0
    stalled = [_accept(store, _request(f"c{n}", "c", session="sc"), "carol")[0] for n in range(3)]
    assert [r.public_seq for r in stalled] == [second.public_seq + n for n in (1, 2, 3)]
    # What the store gives back is what it gave at acceptance: replays, pending, since.
    assert _accept(store, _request("a2", "two", session="sa"), "alice") == (second, True)
    assert store.pending(ANON, "sa", "")[0] == [first, second]
    assert store.since(ANON, "sc", "", 0) == stalled


def test_txn_ids_are_per_principal(backend: Backend) -> None:
    """Another principal's use of a txn id is neither a replay nor a conflict (§7)."""
    alice, _ = _accept(backend.history, _request("t1"), "alice")
    # bob's t1 with alice's very content is his own new message, not her record ...
    bobs, replayed = _accept(backend.history, _request("t1"), "bob")
    assert not replayed and bobs.seq != alice.seq
    # ... and with other content it is no conflict either
    other, replayed = _accept(backend.history, _request("t1", "other", session="s2"), "carol")
    assert not replayed and other.seq not in (alice.seq, bobs.seq)
    # each replays their own
    assert _accept(backend.history, _request("t1"), "alice") == (alice, True)
    assert _accept(backend.history, _request("t1"), "bob") == (bobs, True)
    with pytest.raises(TxnConflictError):
        _accept(backend.history, _request("t1", "changed"), "bob")


def test_accept_checks_blobs_and_writes_blob_refs(backend: Backend) -> None:
    missing = _sha("never uploaded")
    with pytest.raises(BlobMissingError) as absent:
        _accept(backend.history, _request("t1", blobs=(missing,)))
    assert backend.history.last_seq() == 0, "a refused accept records nothing"
    sha, existed, calls = _publish(backend, "photo")
    assert not existed and calls == [sha]
    # a blob that exists but that the caller may not read: the very same answer
    with pytest.raises(BlobMissingError) as unreadable:
        _accept(backend.history, _request("t1", blobs=(sha,)), "bob", readable=set())
    assert str(unreadable.value) == str(absent.value)
    assert backend.history.last_seq() == 0 and backend.media.referencing(sha) == []
    record, _ = _accept(backend.history, _request("t2", blobs=(sha, sha)))
    assert [a.sha256 for a in record.attachments] == [sha, sha]
    assert backend.media.referencing(sha) == [("s1", ANON)]
    assert backend.media.unreferenced_before(T0 + 10, 100) == []


def test_both_stores_answer_the_blob_read_rule_alike(backend: Backend) -> None:
    sha, _, _ = _publish(backend, "shared rule", owner="alice")
    other, _, _ = _publish(backend, "other", owner="bob")
    _accept(backend.history, _request("t1", session="sa", blobs=(sha,)), "alice")
    for store in (backend.history, backend.media):
        assert store.owned_by([sha, other], "alice") == {sha}
        assert store.owned_by([sha, other], "bob") == {other}
        assert store.referencing(sha) == [("sa", "alice")]
        assert store.referencing(other) == []


def test_ageing_retires_and_releases_blob_refs(backend: Backend) -> None:
    store = backend.history
    sha, _, _ = _publish(backend, "old photo")
    first, _ = _accept(store, _request("t1", "one", blobs=(sha,)))
    _accept(store, _request("t2", "two"))
    assert backend.media.referencing(sha) == [("s1", ANON)]
    _accept(store, _request("t3", "three"))  # keep=2: "one" retires
    pending, last = store.pending(ANON, "s1", "")
    assert [r.text for r in pending] == ["two", "three"] and last == first.seq + 2
    assert backend.media.referencing(sha) == []
    assert backend.media.unreferenced_before(T0 + 1, 100) == [sha]
    backend.now[0] = T0 + TTL + 1  # everything is older than the ttl
    assert store.pending(ANON, "s1", "") == ([], last)
    # retired messages still replay and still come back from `since`
    assert _accept(store, _request("t1", "one", blobs=(sha,)))[1]
    assert [r.text for r in store.since(ANON, "s1", "", 0)] == ["one", "two", "three"]


def test_bind_moves_chat_key_messages_and_pending_lists_them(backend: Backend) -> None:
    store = backend.history
    keyed, _ = _accept(store, _request("k1", "first", key="chat1"))
    assert keyed.session_id == "" and keyed.chat_key == "chat1"
    assert [r.seq for r in store.pending(ANON, "", "chat1")[0]] == [keyed.seq]
    assert store.binding(ANON, "chat1") is None
    assert not store.followed("s9")
    assert store.bind(ANON, "chat1", "s9") == 1
    assert store.binding(ANON, "chat1") == "s9"
    assert store.followed("s9") and not store.followed("s1")
    assert store.bind(ANON, "chat1", "s9") == 0, "binding again moves nothing"
    with pytest.raises(ChatKeyBoundError):
        store.bind(ANON, "chat1", "elsewhere")
    later, _ = _accept(store, _request("k2", "second", key="chat1"))
    assert later.session_id == "s9", "a bound chat key accepts into its session"
    assert [r.text for r in store.pending(ANON, "s9", "")[0]] == ["first", "second"]
    assert store.pending(ANON, "", "chat1")[0] == []


def test_chat_keys_live_in_their_principals_namespace(backend: Backend) -> None:
    store = backend.history
    _accept(store, _request("a1", "mine", key="k"), "alice")
    assert store.pending("bob", "", "k")[0] == []
    assert store.since("bob", "", "k", 0) == []
    # bob binds the same key first: nothing of alice's moves, and she can still bind hers
    assert store.bind("bob", "k", "sb") == 0
    assert store.binding("alice", "k") is None
    assert [r.text for r in store.pending("alice", "", "k")[0]] == ["mine"]
    assert store.bind("alice", "k", "sa") == 1, "no ChatKeyBoundError from bob's binding"
    assert store.binding("bob", "k") == "sb" and store.binding("alice", "k") == "sa"
    hers, _ = _accept(store, _request("a2", "hers", key="k"), "alice")
    his, _ = _accept(store, _request("b1", "his", key="k"), "bob")
    assert (hers.session_id, his.session_id) == ("sa", "sb")
    assert [r.text for r in store.since("alice", "", "k", 0)] == ["mine", "hers"]
    assert [r.text for r in store.since("bob", "", "k", 0)] == ["his"]


def test_one_principals_flood_never_retires_anothers_pending(backend: Backend) -> None:
    store = backend.history
    _accept(store, _request("a1", "alice's", key="k"), "alice")
    for n in range(KEEP + 3):
        _accept(store, _request(f"b{n}", f"bob {n}", key="k"), "bob")
    assert [r.text for r in store.pending("alice", "", "k")[0]] == ["alice's"]
    assert len(store.pending("bob", "", "k")[0]) == KEEP


# Texts either backend could mangle: U+0000 (PostgreSQL's TEXT cannot hold it), LIKE and
# escape characters, quotes, astral and non-characters, a BOM, bidi controls, line breaks.
ODD_TEXTS = (
    "a\x00b",
    "\x00",
    "\x00\x00 ends with NUL\x00",
    "quote ' double \" back \\ percent % under _ star *",
    "astral \U0001f642 \U0001d11e, non-character \uffff \ufffe, BOM \ufeff",
    "bidi \u202e\u2066 zero-width \u200b",
    "lines\r\nand\ttabs\x01\x1f\x7f",
    "",
)
# What else reaches the database as text (no U+0000: the boundary refuses it there).
ODD_NAMES = ("ålice", 'o\'brien "q" \\ %_*', "名前 \U0001f642", "\u202edir\u2066")


@pytest.mark.parametrize("principal", [ANON, *ODD_NAMES])
def test_odd_text_is_stored_and_returned_exactly_on_both_backends(
    backend: Backend, principal: str
) -> None:
    """One answer on both backends: every text comes back exactly, U+0000 included."""
    store = backend.history
    sha, _, _ = _publish(backend, f"odd photo {principal}", owner=principal)
    specs = tuple(AttachmentSpec(f"media:{sha}", name, name) for name in ODD_NAMES)
    records = []
    for n, text in enumerate(ODD_TEXTS):
        request = AcceptRequest(f"t{n}", "", f"key{n}", text, specs if n == 0 else ())
        record, replayed = _accept(store, request, principal)
        assert not replayed and record.text == text and record.attachments == request.attachments
        assert _accept(store, request, principal) == (record, True)
        records.append(record)
        # Text that differs only after a U+0000 is other content, not a replay.
        with pytest.raises(TxnConflictError):
            _accept(store, AcceptRequest(f"t{n}", "", f"key{n}", text + "\x00x", ()), principal)
    for n, record in enumerate(records):
        assert store.pending(principal, "", f"key{n}")[0] == [record]
        assert store.since(principal, "", f"key{n}", 0) == [record]
    assert store.bind(principal, "key0", "s-odd") == 1
    assert store.pending(ANON, "s-odd", "")[0] == [replace(records[0], session_id="s-odd")]
    assert store.referencing(sha) == [("s-odd", principal)]
    assert store.owned_by([sha], principal) == {sha}
    for name in ODD_NAMES:
        row = BlobRow(_sha(name), 1, name, T0)
        assert not backend.media.publish(row, lambda: None, principal)
        assert backend.media.get(row.sha256) == row
        assert backend.media.owned_by([row.sha256], principal) == {row.sha256}
        assert backend.media.owned_by([row.sha256], name + "x") == set()


def test_since_and_last_seq_order_by_seq(backend: Backend) -> None:
    store = backend.history
    seqs = [
        _accept(store, _request(f"t{n}", f"m{n}", session="a" if n % 2 else "b"))[0].seq
        for n in range(6)
    ]
    assert seqs == sorted(seqs) and len(set(seqs)) == 6
    assert [r.seq for r in store.since(ANON, "a", "", 0)] == seqs[1::2]
    assert [r.seq for r in store.since(ANON, "a", "", seqs[3])] == [seqs[5]]
    assert store.since(ANON, "b", "", seqs[-1]) == []
    assert store.last_seq() == seqs[-1]


def test_publish_get_existing_and_owners(backend: Backend) -> None:
    media = backend.media
    sha, existed, calls = _publish(backend, "bytes", owner="alice")
    assert not existed and calls == [sha]
    row = media.get(sha)
    assert row == BlobRow(sha, 5, "image/png", T0)
    assert media.get(_sha("absent")) is None
    # a re-upload keeps size and media type and gets a fresh created_at; it
    # "existed" only for a caller that had uploaded it before
    fresh = BlobRow(sha, 999, "text/plain", T0 + 50)
    assert not media.publish(fresh, lambda: None, "bob"), "alice's upload is not revealed"
    assert media.get(sha) == BlobRow(sha, 5, "image/png", T0 + 50)
    assert media.publish(fresh, lambda: None, "bob") and media.publish(fresh, lambda: None, "alice")
    assert media.publish(fresh, lambda: None), "without auth: the row existed"
    many = [_sha(f"x{n}") for n in range(1200)]  # over QUERY_BATCH
    assert media.existing([*many, sha, sha]) == {sha}
    assert media.owned_by([sha, *many], "alice") == {sha}
    assert media.owned_by([sha], "bob") == {sha}
    assert media.owned_by([sha], "carol") == set()


def test_collection_rules(backend: Backend) -> None:
    media = backend.media
    old, _, _ = _publish(backend, "old", at=T0 - 100, owner="alice")
    young, _, _ = _publish(backend, "young", at=T0)
    kept, _, _ = _publish(backend, "kept", at=T0 - 200)
    _accept(backend.history, _request("t1", blobs=(kept,)))
    cutoff = T0 - 10
    assert media.unreferenced_before(cutoff, 100) == [old]
    assert media.unreferenced_before(T0 + 1, 1) == [old], "oldest first, limited"
    removed: list[str] = []
    assert not media.delete_if_unreferenced(young, cutoff, lambda: removed.append(young))
    assert not media.delete_if_unreferenced(kept, cutoff, lambda: removed.append(kept))
    assert media.delete_if_unreferenced(old, cutoff, lambda: removed.append(old))
    assert not media.delete_if_unreferenced(old, cutoff, lambda: removed.append("twice"))
    assert removed == [old]
    assert media.get(old) is None and media.owned_by([old], "alice") == set()
    assert media.get(young) is not None and media.get(kept) is not None


def test_exclusive_gc(backend: Backend) -> None:
    _, other_media = backend.replica()
    with backend.media.exclusive_gc() as first:
        assert first
        with other_media.exclusive_gc() as second:
            # PostgreSQL: one collector across replicas; SQLite: per-row transactions suffice.
            assert second is (backend.name == "sqlite")
    with other_media.exclusive_gc() as again:
        assert again, "released when the block ends"


def test_two_replicas_racing_on_one_txn_id_record_one_message(backend: Backend) -> None:
    replicas = [backend.replica()[0] for _ in range(2)]
    for n in range(10):
        barrier = threading.Barrier(2)

        def accept(
            store: AcceptedMessageStore, txn: str = f"race{n}", barrier: threading.Barrier = barrier
        ) -> tuple[int, bool]:
            barrier.wait()
            record, replayed = _accept(store, _request(txn, "same"))
            return record.seq, replayed

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(accept, replicas))
        assert {seq for seq, _ in results} == {results[0][0]}, results
        assert sorted(replayed for _, replayed in results) == [False, True], results
    assert len(backend.history.since(ANON, "s1", "", 0)) == 10


def test_postgres_migrations_are_versioned_and_safe_to_race(
    make_database: Callable[[], str],
) -> None:
    url = make_database()

    def migrate_once() -> int:
        with psycopg.connect(url) as connection:
            return pg_state.migrate(connection)

    with ThreadPoolExecutor(4) as pool:
        latest = pg_state.MIGRATIONS[-1][0]
        assert list(pool.map(lambda _: migrate_once(), range(4))) == [latest] * 4
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [v for v, _ in pg_state.MIGRATIONS]


def test_sqlite_and_postgres_define_the_same_tables(tmp_path: Path, pg_url: str) -> None:
    open_pool(pg_url, name="schema").close()
    with psycopg.connect(pg_url) as connection:
        pg_columns = {
            (t, c)
            for t, c in connection.execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = 'public'"
            ).fetchall()
        }
    SqliteBlobMetadataStore(tmp_path).close()
    lite = sqlite3.connect(tmp_path / "scrollback.db")
    try:
        tables = [r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        lite_columns = {
            (t, r[1])
            for t in tables
            if t != "sqlite_sequence"
            for r in lite.execute(f"PRAGMA table_info({t})")
        }
    finally:
        lite.close()
    assert pg_columns == lite_columns


def test_unreachable_database_error_never_shows_the_url() -> None:
    url = "postgresql://scrollback:s3cret-pw@127.0.0.1:1/nowhere"
    with pytest.raises(DatabaseUnavailableError) as raised:
        open_pool(url, name="unreachable", connect_timeout=1)
    assert "s3cret" not in str(raised.value) and "127.0.0.1" not in str(raised.value)


# Rows as version 2 left them: (client_txn_id, session_id, chat_key, accepted_by), and bindings.
V2_MESSAGES = (
    ("m1", "sa", "solo", "alice"),
    ("m2", "sx", "shared", "alice"),
    ("m3", "sx", "shared", "bob"),
    ("m4", "sn", "anon", None),
    ("m5", None, "loose", "carol"),
)
V2_BINDINGS = (("solo", "sa"), ("shared", "sx"), ("anon", "sn"), ("empty", "se"))


def _fill_v2(execute: Callable[[str, tuple[object, ...]], object], mark: str) -> None:
    """Insert the version-2 rows with `execute` (placeholders `mark`)."""
    for number, (txn, session, key, by) in enumerate(V2_MESSAGES):
        request = AcceptRequest(txn, session or "", "" if session else key, f"text {number}", ())
        execute(
            "INSERT INTO accepted_message (client_txn_id, session_id, chat_key, text, attachments,"
            f" content_digest, accepted_at, accepted_by) VALUES ({', '.join([mark] * 8)})",
            (txn, session, key, f"text {number}", "[]", request.digest, T0, by),
        )
    for key, session in V2_BINDINGS:
        execute(
            f"INSERT INTO chat_binding (chat_key, session_id, bound_at) VALUES ({mark}, {mark}, {mark})",
            (key, session, T0),
        )
    # m1 references a blob (a foreign key into the table migration 6 rebuilds) ...
    execute(
        f"INSERT INTO blob (sha256, size_bytes, media_type, created_at) VALUES ({mark}, 5,"
        f" 'image/png', {mark})",
        (_sha("v2 photo"), T0),
    )
    execute(
        "INSERT INTO blob_ref (sha256, message_seq) SELECT"
        f" {mark}, seq FROM accepted_message WHERE client_txn_id = 'm1'",
        (_sha("v2 photo"),),
    )
    # ... and the newest seq ever handed out belongs to a row no longer there.
    execute(
        "INSERT INTO accepted_message (client_txn_id, session_id, chat_key, text, attachments,"
        f" content_digest, accepted_at, accepted_by) VALUES ('gone', 'sa', NULL, 'x', '[]', 'd',"
        f" {mark}, 'alice')",
        (T0,),
    )
    execute("DELETE FROM accepted_message WHERE client_txn_id = 'gone'", ())


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_migrations_3_6_and_8_keep_existing_rows_in_their_principals_namespace(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: AcceptedMessageStore
    if name == "sqlite":
        lite = sqlite3.connect(tmp_path / "scrollback.db")
        lite.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)"
        )
        for version, sql in sqlite_state.MIGRATIONS[:2]:
            for statement in sqlite_state.migration_statements(sql):
                lite.execute(statement)
            lite.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, T0))
        _fill_v2(lite.execute, "?")
        lite.commit()
        lite.close()
        store = SqliteAcceptedMessageStore(tmp_path)
    else:
        url = request.getfixturevalue("make_database")()
        with psycopg.connect(url) as connection:
            connection.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                " applied_at DOUBLE PRECISION NOT NULL)"
            )
            for version, sql in pg_state.MIGRATIONS[:2]:
                for statement in pg_state.migration_statements(sql):
                    connection.execute(statement)
                connection.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, T0))
            _fill_v2(connection.execute, "%s")
        pool = open_pool(url, name="migrated", max_size=2)
        store = PostgresAcceptedMessageStore(pool)
    try:
        # m1's blob reference survived the rebuild of its table (before any accept ages it out)
        assert store.referencing(_sha("v2 photo")) == [("sa", "alice")]
        # the one principal whose messages used a key owns its binding ...
        assert store.binding("alice", "solo") == "sa"
        assert store.binding("bob", "solo") is None and store.binding(ANON, "solo") is None
        # ... several principals, or none recorded: the anonymous principal
        assert store.binding(ANON, "shared") == "sx" and store.binding("alice", "shared") is None
        assert store.binding(ANON, "anon") == "sn" and store.binding(ANON, "empty") == "se"
        # a NULL accepted_by is the anonymous principal's: it replays for it ...
        m4 = AcceptRequest("m4", "sn", "", "text 3", ())
        replayed, was_replay = _accept(store, m4)
        assert was_replay and replayed.text == "text 3"
        # ... and the id is its alone (migration 6): alice's m4 is a new message, whose seq
        # is past every seq ever handed out (the deleted row's included)
        mine, was_replay = _accept(store, m4, "alice")
        assert not was_replay and mine.seq > len(V2_MESSAGES) + 1
        assert mine.seq > replayed.seq
        # the public seq of a row from before migration 8 is its seq, below any new one's
        assert replayed.public_seq == replayed.seq and mine.public_seq > replayed.public_seq
        # an unbound chat-key message stays its principal's
        assert [r.text for r in store.since("carol", "", "loose", 0)] == ["text 4"]
        assert store.since(ANON, "", "loose", 0) == []
        # bindings now live per principal: bob binds "solo" elsewhere, alice's stays
        assert store.bind("bob", "solo", "sb") == 0 and store.binding("alice", "solo") == "sa"
    finally:
        store.close()
