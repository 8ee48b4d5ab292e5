"""Garbage collection of blobs: a property test over random interleavings of
upload, accept, age-out, clock advance and gc, plus a concurrent accept race."""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
import threading
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from media_service.blob_paths import BlobPaths
from media_service.blobs import BlobStore
from media_service.gc import collect_garbage
from media_service.store.sqlite import SqliteBlobMetadataStore
from scrollback.state.sqlite import connect

GRACE = 3600.0
CONTENTS = [f"blob {k}".encode() * (k + 1) for k in range(4)]
SHAS = [hashlib.sha256(c).hexdigest() for c in CONTENTS]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("upload"), st.integers(0, 3)),
        st.tuples(st.just("accept"), st.integers(0, 3)),
        st.tuples(st.just("age_out"), st.integers(0, 3)),
        st.tuples(
            st.just("advance"),
            st.sampled_from([1.0, GRACE / 2, GRACE - 1, GRACE, GRACE + 1, 3 * GRACE]),
        ),
        st.tuples(st.just("gc"), st.just(0)),
    ),
    max_size=30,
)


def accept(connection: sqlite3.Connection, sha256: str, now: float) -> bool:
    """What the history service does on accept: message + blob_ref rows, one transaction."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        if connection.execute("SELECT 1 FROM blob WHERE sha256 = ?", (sha256,)).fetchone() is None:
            connection.execute("ROLLBACK")
            return False  # FAILED_PRECONDITION: missing blob on accept
        seq = connection.execute(
            "INSERT INTO accepted_message (client_txn_id, session_id, text, attachments,"
            " content_digest, accepted_at) VALUES (?, 's', 't', '[]', 'd', ?)",
            (uuid.uuid4().hex, now),
        ).lastrowid
        connection.execute(
            "INSERT INTO blob_ref (sha256, message_seq) VALUES (?, ?)", (sha256, seq)
        )
        connection.execute("COMMIT")
        return True
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def age_out(connection: sqlite3.Connection, sha256: str, now: float) -> None:
    """Retiring the pending records that used a blob."""
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("DELETE FROM blob_ref WHERE sha256 = ?", (sha256,))
    connection.execute(
        "UPDATE accepted_message SET retired_at = ? WHERE retired_at IS NULL", (now,)
    )
    connection.execute("COMMIT")


def present(store: BlobStore, k: int) -> bool:
    has_row = store.metadata.get(SHAS[k]) is not None
    has_file = store.paths.blob(SHAS[k]).is_file()
    assert has_row == has_file, "a row without its file or a file without its row"
    return has_row


@settings(max_examples=max(100, settings.default.max_examples // 7))
@given(ops)
def test_gc_never_deletes_referenced_and_always_collects_expired(
    operations: list[tuple[str, float]],
) -> None:
    clock = [1_000_000.0]
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder)
        metadata = SqliteBlobMetadataStore(state)
        store = BlobStore(BlobPaths(state), metadata, max_blob_size=1 << 20, clock=lambda: clock[0])
        history = connect(state)
        refs = [0, 0, 0, 0]
        created: list[float | None] = [None] * 4
        try:
            for op, arg in operations:
                k = int(arg)
                if op == "upload":
                    store.write_bytes(None, CONTENTS[k])
                    created[k] = clock[0]
                elif op == "accept":
                    if accept(history, SHAS[k], clock[0]):
                        refs[k] += 1
                    else:
                        assert created[k] is None
                elif op == "age_out":
                    age_out(history, SHAS[k], clock[0])
                    refs[k] = 0
                elif op == "advance":
                    clock[0] += arg
                else:
                    report = collect_garbage(store, now=clock[0], grace_seconds=GRACE)
                    for j in range(4):
                        stamp = created[j]
                        if stamp is None:
                            continue
                        if refs[j] == 0 and stamp < clock[0] - GRACE:
                            assert SHAS[j] in report.deleted
                            created[j] = None
                        else:
                            assert SHAS[j] not in report.deleted
                for j in range(4):
                    assert present(store, j) == (created[j] is not None)
                    if refs[j]:
                        assert present(store, j), "a referenced blob is gone"
        finally:
            history.close()
            metadata.close()


def race_accept(
    barrier: threading.Barrier, history: sqlite3.Connection, sha256: str, accepted: list[bool]
) -> None:
    barrier.wait()
    accepted.append(accept(history, sha256, 10 * GRACE))


def race_gc(barrier: threading.Barrier, store: BlobStore) -> None:
    barrier.wait()
    collect_garbage(store, now=10 * GRACE, grace_seconds=GRACE)


def test_gc_races_a_concurrent_accept() -> None:
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder)
        metadata = SqliteBlobMetadataStore(state)
        clock = [0.0]
        store = BlobStore(BlobPaths(state), metadata, max_blob_size=1 << 20, clock=lambda: clock[0])
        history = connect(state)
        try:
            for round_number in range(30):
                data = f"race {round_number}".encode()
                sha = hashlib.sha256(data).hexdigest()
                clock[0] = 0.0
                store.write_bytes(None, data)
                accepted: list[bool] = []
                barrier = threading.Barrier(2)

                threads = [
                    threading.Thread(target=race_accept, args=(barrier, history, sha, accepted)),
                    threading.Thread(target=race_gc, args=(barrier, store)),
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                exists = store.metadata.get(sha) is not None
                assert exists == store.paths.blob(sha).is_file()
                if accepted[0]:
                    assert exists, "gc deleted a blob an accept referenced"
                else:
                    assert not exists
        finally:
            history.close()
            metadata.close()
