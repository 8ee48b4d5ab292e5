"""The persisted line index (scrollback.lineindex) over both state stores.

Each test runs on SQLite and on PostgreSQL: the index built on first touch
matches the file line for line (offsets, lengths, top-level uuids, image
candidates), grows with the file without reading it again, is discarded when
the file is rewritten, truncated or replaced, survives a restart (a new store
on the same database reads nothing), and two builders of one file, each on its
own connection, leave exactly one row per line.
"""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scrollback.linefile import LocalSource
from scrollback.lineindex import INLINE_EXTEND_BYTES, LineIndex, Snapshot
from scrollback.state.line_index import IndexedLine, LineIndexStore
from scrollback.state.line_index_sqlite import SqliteLineIndexStore

StoreFactory = Callable[[], LineIndexStore]
KEY = "proj/session.jsonl"


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """New stores on one database (each its own connection, as another process would have)."""
    opened: list[LineIndexStore] = []

    def make() -> LineIndexStore:
        store: LineIndexStore
        if request.param == "sqlite":
            store = SqliteLineIndexStore(tmp_path / "state")
        else:
            from scrollback.state.line_index_postgres import PostgresLineIndexStore
            from scrollback.state.postgres import open_pool

            store = PostgresLineIndexStore(open_pool(url, name="lineindex-test"))
        opened.append(store)
        return store

    url = request.getfixturevalue("pg_url") if request.param == "postgres" else ""
    yield make
    for store in opened:
        store.close()


def line(uuid: str | None, images: int = 0, nested: str | None = None, pad: int = 0) -> bytes:
    """A transcript line: a top-level uuid, images, and maybe a nested uuid before it."""
    content: list[object] = [{"type": "text", "text": "x" * pad}]
    content += [{"type": "image", "source": {"data": "QUJD"}} for _ in range(images)]
    value: dict[str, object] = {"type": "user"}
    if nested is not None:
        value["toolUseResult"] = {"uuid": nested}
    value["message"] = {"content": content}
    if uuid is not None:
        value["uuid"] = uuid
    return json.dumps(value, separators=(",", ":")).encode()


LINES = [
    line("a-1", images=2),
    line(None),
    b"",
    line("a-3", nested="nested-x"),
    b"   ",
    line("a-5", pad=20_000),  # longer than the small chunks below
    line("a-6", images=1, pad=9_000),
    b"[1,2,3]",
    line("a-8", images=3, nested="nested-y", pad=30_000),
]


def write(path: Path, lines: list[bytes], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(item + b"\n" for item in lines) + tail)


def expected(lines: list[bytes], base: int = 0) -> list[IndexedLine]:
    rows = []
    offset = base
    for item in lines:
        if item and not item.isspace():  # blank lines are left out, whitespace ones too
            try:
                parsed = json.loads(item)
            except ValueError:
                parsed = None
            uuid = parsed.get("uuid") if isinstance(parsed, dict) else None
            images = item.count(b'"type":"image"')
            rows.append(IndexedLine(offset, len(item), uuid, images))
        offset += len(item) + 1
    return rows


def all_rows(store: LineIndexStore, index: LineIndex, path: Path) -> list[IndexedLine]:
    with open(path, "rb") as handle:
        generation = index.ensure(KEY, LocalSource(handle.fileno())).state.generation
    uuids = [f"a-{n}" for n in range(20)] + ["nested-x", "nested-y"]
    return store.lines_for(KEY, generation, uuids)


def ensure(index: LineIndex, path: Path) -> int:
    with open(path, "rb") as handle:
        return index.ensure(KEY, LocalSource(handle.fileno())).state.generation


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_first_touch_indexes_every_line(
    make_store: StoreFactory, tmp_path: Path, chunk: int
) -> None:
    path = tmp_path / "t.jsonl"
    write(path, LINES, tail=b'{"uuid":"a-tail"')
    store = make_store()
    index = LineIndex(store, chunk_bytes=chunk)
    want = expected(LINES)
    assert all_rows(store, index, path) == [r for r in want if r.uuid is not None]
    generation = ensure(index, path)
    assert store.line_count(KEY, generation) == len(want)
    with_images = store.image_lines(KEY, generation, 0, path.stat().st_size)
    assert [r.offset for r in with_images] == [r.offset for r in want if r.images]
    # the unterminated tail is not a line yet, but its start is known
    with open(path, "rb") as handle:
        size = path.stat().st_size
        assert index.last_line_start(KEY, LocalSource(handle.fileno()), size) == size - len(
            b'{"uuid":"a-tail"'
        )


def test_growth_extends_without_reading_again(make_store: StoreFactory, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, LINES[:4], tail=b'{"uuid":"a-9"')
    store = make_store()
    index = LineIndex(store, chunk_bytes=4096)
    first = ensure(index, path)
    read_before = index.bytes_read
    size_before = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(b',"type":"user"}\n' + line("a-10", images=1) + b"\n")
    assert ensure(index, path) == first
    assert index.builds == 1
    # only what was appended (and the tail it completed) is read
    assert index.bytes_read - read_before <= path.stat().st_size - size_before + 64
    rows = all_rows(store, index, path)
    assert [r.uuid for r in rows] == ["a-1", "a-3", "a-9", "a-10"]
    tail_row = rows[2]
    with open(path, "rb") as handle:
        data = os.pread(handle.fileno(), tail_row.length + 1, tail_row.offset)
    assert data == b'{"uuid":"a-9","type":"user"}\n'


def test_rewrite_truncation_and_rename_replace_rebuild(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    write(path, LINES)
    store = make_store()
    index = LineIndex(store, chunk_bytes=4096)
    generation = ensure(index, path)
    # rewritten in place, same size, a byte changed past the head (just before `covered`)
    data = bytearray(path.read_bytes())
    data[-3] = ord("X") if data[-3] != ord("X") else ord("Y")
    with open(path, "r+b") as handle:
        handle.write(bytes(data))
    rewritten = ensure(index, path)
    assert rewritten > generation and index.builds == 2
    # truncated
    write(path, LINES[:2])
    truncated = ensure(index, path)
    assert truncated > rewritten
    assert [r.uuid for r in all_rows(store, index, path)] == ["a-1"]
    # replaced by rename (a new inode), with other lines at other offsets
    other = tmp_path / "new.jsonl"
    write(other, [line("b-0"), line("a-3")])
    os.replace(other, path)
    assert ensure(index, path) > truncated
    rows = all_rows(store, index, path)
    assert [(r.uuid, r.offset) for r in rows] == [("a-3", len(line("b-0")) + 1)]


def test_restart_keeps_the_index(make_store: StoreFactory, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, LINES)
    first = LineIndex(make_store(), chunk_bytes=4096)
    generation = ensure(first, path)
    again = LineIndex(make_store(), chunk_bytes=4096)  # a restarted process
    assert ensure(again, path) == generation
    assert again.builds == 0 and again.bytes_read == 0


def test_concurrent_builders_write_each_line_once(make_store: StoreFactory, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [line(f"c-{n}", images=n % 2, pad=n * 37 % 5000) for n in range(400)]
    write(path, lines)
    indexes = [LineIndex(make_store(), chunk_bytes=8192) for _ in range(2)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def build(index: LineIndex) -> None:
        try:
            barrier.wait()
            ensure(index, path)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=build, args=(index,)) for index in indexes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store = make_store()
    generation = ensure(LineIndex(store), path)
    assert store.line_count(KEY, generation) == len(lines)
    rows = store.lines_for(KEY, generation, [f"c-{n}" for n in range(400)])
    assert rows == expected(lines)


def test_rows_before_and_from_an_offset(make_store: StoreFactory, tmp_path: Path) -> None:
    """lines_before / lines_from: (offset, length) rows around any offset, bounded by a limit."""
    path = tmp_path / "t.jsonl"
    write(path, LINES, tail=b'{"uuid":"a-tail"')
    index = LineIndex(make_store(), chunk_bytes=4096)
    rows = [(r.offset, r.length) for r in expected(LINES)]  # every non-empty line, in order
    with open(path, "rb") as handle:
        snapshot = index.ensure(KEY, LocalSource(handle.fileno()))
    end = path.stat().st_size
    assert index.lines_from(snapshot, 0, 100) == rows
    assert index.lines_before(snapshot, end, 100) == rows[::-1]
    for at, (offset, _length) in enumerate(rows):
        assert index.lines_from(snapshot, offset, 2) == rows[at : at + 2]
        assert index.lines_from(snapshot, offset + 1, 1) == rows[at + 1 : at + 2]
        assert index.lines_before(snapshot, offset, 3) == rows[max(0, at - 3) : at][::-1]
        assert index.lines_before(snapshot, offset + 1, 1) == [rows[at]]
    assert index.lines_before(snapshot, 0, 10) == []
    assert index.lines_from(snapshot, end, 10) == []


def test_remembered_rows_answer_as_the_store_would(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """Rows asked again come from the process, not the store, and stay what the store holds:
    through growth (a run from an offset that ended early is asked again) and a rewrite."""
    path = tmp_path / "t.jsonl"
    write(path, LINES)
    index = LineIndex(make_store(), chunk_bytes=4096)

    def snapshot() -> Snapshot:
        with open(path, "rb") as handle:
            return index.ensure(KEY, LocalSource(handle.fileno()))

    first = snapshot()
    rows = [(r.offset, r.length) for r in expected(LINES)]
    end = path.stat().st_size
    assert index.lines_before(first, end, 3) == rows[::-1][:3]
    assert index.row_queries == 1
    assert index.lines_from(first, 0, 100) == rows
    assert index.row_queries == 2
    assert index.lines_before(first, end, 5) == rows[::-1][:5]  # one run answers both
    assert index.lines_from(first, 0, 3) == rows[:3]
    assert index.row_queries == 2

    grown = LINES + [line(f"g-{n}") for n in range(3)]
    with open(path, "ab") as handle:
        handle.write(b"".join(item + b"\n" for item in grown[len(LINES) :]))
    second = snapshot()
    assert second.state.generation == first.state.generation
    all_now = [(r.offset, r.length) for r in expected(grown)]
    assert index.lines_from(second, 0, 100) == all_now  # ended early before: asked again
    assert index.lines_before(second, end, 100) == rows[::-1]
    assert index.lines_before(second, path.stat().st_size, 2) == all_now[::-1][:2]

    # An unterminated tail: rows before an offset past `covered` can still grow.
    with open(path, "ab") as handle:
        handle.write(b'{"uuid":"t-1"')
    tailed = snapshot()
    size = path.stat().st_size
    assert tailed.state.covered < size
    assert index.lines_before(tailed, size, 100) == all_now[::-1]
    with open(path, "ab") as handle:
        handle.write(b"}\n")
    assert index.lines_before(snapshot(), size, 1) == [
        (tailed.state.covered, size - tailed.state.covered + 1)
    ]

    write(path, LINES[::-1])  # rewritten: a new generation, nothing remembered applies
    third = snapshot()
    assert third.state.generation != first.state.generation
    reversed_rows = [(r.offset, r.length) for r in expected(LINES[::-1])]
    assert index.lines_before(third, path.stat().st_size, 100) == reversed_rows[::-1]
    assert index.lines_from(third, 0, 100) == reversed_rows


def test_current_never_builds(make_store: StoreFactory, tmp_path: Path) -> None:
    """`current` answers from an index of this file version only (extended), never a new one."""
    path = tmp_path / "t.jsonl"
    write(path, LINES)
    index = LineIndex(make_store(), chunk_bytes=4096)
    with open(path, "rb") as handle:
        assert index.current(KEY, LocalSource(handle.fileno())) is None
        assert index.builds == 0
        index.ensure(KEY, LocalSource(handle.fileno()))
    with open(path, "ab") as handle:
        handle.write(line("a-9") + b"\n")
    with open(path, "rb") as handle:
        snapshot = index.current(KEY, LocalSource(handle.fileno()))
        assert snapshot is not None and snapshot.state.covered == path.stat().st_size
    write(path, LINES[::-1])  # rewritten: the old index does not describe it
    with open(path, "rb") as handle:
        assert index.current(KEY, LocalSource(handle.fileno())) is None
    assert index.builds == 1


def test_an_up_to_date_index_allocates_no_chunk(make_store: StoreFactory, tmp_path: Path) -> None:
    """Every window asks for the index: one that is up to date costs no chunk-sized buffer."""
    path = tmp_path / "t.jsonl"
    write(path, LINES)
    index = LineIndex(make_store())  # the default 8 MiB chunk
    with open(path, "rb") as handle:
        index.ensure(KEY, LocalSource(handle.fileno()))
        tracemalloc.start()
        try:
            for _ in range(3):
                index.ensure(KEY, LocalSource(handle.fileno()))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 1024 * 1024, peak


def test_current_and_covering_never_wait_for_a_build_nor_read_a_long_tail(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """What windows ask answers at once while a build runs, and leaves a long growth to it."""
    path = tmp_path / "t.jsonl"
    write(path, LINES, tail=b'{"uuid":"a-tail","x":"')
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size + 8 * INLINE_EXTEND_BYTES)  # zeros, no newline
    index = LineIndex(make_store(), chunk_bytes=1 << 20)
    ensure(index, path)
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size + 8 * INLINE_EXTEND_BYTES)  # the tail goes on
    building = index._lock(KEY)
    with open(path, "rb") as handle:
        source = LocalSource(handle.fileno())
        before = index.store.state(KEY)
        assert before is not None and before.scanned < path.stat().st_size
        read = index.bytes_read
        with building:  # held as a running build holds it
            snapshot = index.current(KEY, source)
            assert snapshot is not None and snapshot.state == before
            covering = index.covering(KEY, source, before.covered)
            assert covering is not None and covering.state == before
            assert index.bytes_read == read, "the long growth was read on the caller's thread"
            # A boundary past what the index covers: the byte scan, not a wait.
            assert index.covering(KEY, source, path.stat().st_size) is None
        # `current` left the growth to a background build.
        deadline = time.monotonic() + 60
        while (state := index.store.state(KEY)) is None or state.scanned < path.stat().st_size:
            assert time.monotonic() < deadline, "the background build never ran"
            time.sleep(0.01)
