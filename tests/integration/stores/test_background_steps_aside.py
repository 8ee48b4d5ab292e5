"""Background line index builds step aside for the process's requests (scrollback.foreground).

A build started by `LineIndex.build_later` runs on a background thread: while
a request is in flight it moves on by at most one chunk per
`MAX_WAIT_SECONDS` (a bounded share, not a stop), and once the requests end
it finishes. A request's own thread (an inline extend) never waits. Real
files and a real SQLite store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrollback import foreground
from scrollback.linefile import LocalSource
from scrollback.lineindex import LineIndex
from scrollback.state.line_index_sqlite import SqliteLineIndexStore

KEY = "proj/big.jsonl"
CHUNK = 64 * 1024


@pytest.fixture
def index(tmp_path: Path) -> Iterator[LineIndex]:
    store = SqliteLineIndexStore(tmp_path / "state")
    try:
        yield LineIndex(store, chunk_bytes=CHUNK)
    finally:
        store.close()


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "big.jsonl"
    row = b'{"type":"user","uuid":"u-%d","message":{"content":"' + b"x" * 900 + b'"}}\n'
    path.write_bytes(b"".join(row.replace(b"%d", str(n).encode()) for n in range(4000)))
    return path


def builds_running() -> bool:
    return any(thread.name == "line-index-build" for thread in threading.enumerate())


def wait_for_builds(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while builds_running():
        assert time.monotonic() < deadline, "the background build never ended"
        time.sleep(0.01)


def test_a_background_build_yields_while_a_request_is_in_flight(
    index: LineIndex, transcript: Path
) -> None:
    size = transcript.stat().st_size
    chunks = size // CHUNK
    assert chunks >= 40
    with open(transcript, "rb") as handle:
        foreground.call_started()
        try:
            index.build_later(KEY, LocalSource(handle.fileno()))
            held = 0.5
            time.sleep(held)
            read = index.bytes_read
            # At most one chunk per wait, and a few for the clock's slack.
            assert read <= (held / foreground.MAX_WAIT_SECONDS + 3) * CHUNK, (read, size)
            assert read > 0, "a bounded share, not a stop"
        finally:
            foreground.call_ended()
        wait_for_builds(30)
        assert index.bytes_read >= size
        assert index.ensure(KEY, LocalSource(handle.fileno())).state.covered == size


def test_a_requests_own_thread_never_waits(index: LineIndex, transcript: Path) -> None:
    with open(transcript, "rb") as handle:
        foreground.call_started()
        try:
            started = time.monotonic()
            snapshot = index.ensure(KEY, LocalSource(handle.fileno()))
            assert snapshot.state.covered == transcript.stat().st_size
            # Dozens of chunks: stepping aside at each would take seconds.
            assert time.monotonic() - started < 40 * foreground.MAX_WAIT_SECONDS
        finally:
            foreground.call_ended()
