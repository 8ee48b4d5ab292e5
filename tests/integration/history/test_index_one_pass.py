"""One indexing pass per file writes its search rows, its line index and its insight together.

The history server's indexer, given the line index and the insight index,
reads each file's new lines once and feeds all three. Each is checked against
the same index built on its own (its own reader, another state directory), on
the real corpus and on a file with a line too long to hold, blank lines, a
line that is not an object and an unterminated tail; then again after the
files grow. The line index's own builder reads no byte of them and insight
asked afterwards reads no line again: the pass's one read was enough.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from history_service.insight import InsightIndex
from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from history_service.store.insight import SqliteInsightStore
from scrollback.directory import DirectoryRoot
from scrollback.linefile import LocalSource
from scrollback.lineindex import LineIndex
from scrollback.state.line_index import IndexedLine
from scrollback.state.line_index_sqlite import SqliteLineIndexStore

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MAX_LINE = 64 * 1024


def entry(number: int, text: str, **extra: object) -> bytes:
    value = {
        "type": "assistant",
        "uuid": f"u-{number}",
        "timestamp": f"2026-01-01T00:00:{number % 60:02d}.000Z",
        "message": {
            "id": f"m-{number // 2}",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 3, "output_tokens": number},
            "content": [{"type": "text", "text": text}],
        },
        **extra,
    }
    return json.dumps(value, separators=(",", ":")).encode()


def image_entry(number: int) -> bytes:
    value = {
        "type": "user",
        "uuid": f"u-{number}",
        "message": {
            "role": "user",
            "content": [
                {"type": "text", "text": f"a photo number{number}"},
                {"type": "image", "source": {"type": "base64", "data": "QUJD" * 600}},
            ],
        },
    }
    return json.dumps(value, separators=(",", ":")).encode()


class Indexes:
    """The three indexes of one state directory over one root."""

    def __init__(self, root: Path, state: Path) -> None:
        self.transcripts = DirectoryRoot(root)
        self.search = TantivySearchIndex(state)
        self.lines = LineIndex(SqliteLineIndexStore(state))
        self.insight_store = SqliteInsightStore(state)
        self.insight = InsightIndex(self.transcripts, self.insight_store, max_line_size=MAX_LINE)
        self.state = state

    def close(self) -> None:
        self.insight_store.close()
        self.lines.close()
        self.search.close()

    def search_rows(self) -> list[tuple[object, ...]]:
        """Every entry of every project's index: (path, start, end, uuid, type, text)."""
        fields = ("path", "offset", "line_end", "uuid", "type", "body")
        rows = [tuple(doc.get(f) for f in fields) for doc in self.search.stored_entries()]
        return sorted(rows, key=lambda row: (str(row[0]), str(row[1]).zfill(20)))

    def line_rows(self, path: Path) -> tuple[list[tuple[int, int]], list[IndexedLine]]:
        key = os.path.relpath(path, self.transcripts.root)
        state = self.lines.store.state(key)
        assert state is not None, key
        size = path.stat().st_size
        assert state.scanned == size, key
        store = self.lines.store
        return (
            store.lines_from(key, state.generation, 0, 1_000_000),
            store.image_lines(key, state.generation, 0, size),
        )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for number, path in enumerate(sorted(CORPUS.rglob("*.jsonl"))):
        project = root / path.parent.name.replace(".", "-")
        project.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, project / f"s{number}.jsonl")
    own = root / "proj"
    own.mkdir()
    lines = [entry(0, "the first words"), b"", image_entry(1), b"   ", b"[1,2,3]"]
    lines += [entry(2, "long " + "word " * (MAX_LINE // 4))]  # too long to hold
    lines += [entry(n, f"entry number{n} says hello") for n in range(3, 40)]
    (own / "grown.jsonl").write_bytes(b"\n".join(lines) + b"\n" + entry(40, "unterminated"))
    return root


@pytest.fixture
def indexes(root: Path, tmp_path: Path) -> Iterator[tuple[Indexes, Indexes]]:
    one = Indexes(root, tmp_path / "one-pass")
    apart = Indexes(root, tmp_path / "apart")
    yield one, apart
    one.close()
    apart.close()


def one_pass(indexes: Indexes) -> SearchIndexer:
    indexer = SearchIndexer(
        indexes.transcripts,
        indexes.search,
        max_line_size=MAX_LINE,
        line_index=indexes.lines,
        insight=indexes.insight,
    )
    indexer.catch_up()
    return indexer


def each_apart(indexes: Indexes) -> None:
    SearchIndexer(indexes.transcripts, indexes.search, max_line_size=MAX_LINE).catch_up()
    for transcript in indexes.transcripts.list(None):
        indexes.insight.refresh(transcript)
        with Path(transcript.location).open("rb") as handle:
            indexes.lines.ensure(
                os.path.relpath(transcript.location, indexes.transcripts.root),
                LocalSource(handle.fileno()),
            )


def assert_same(one: Indexes, apart: Indexes) -> None:
    assert one.search_rows() == apart.search_rows()
    for transcript in one.transcripts.list(None):
        path = Path(transcript.location)
        if not path.stat().st_size:
            continue  # nothing to index: built on demand as before
        assert one.line_rows(path) == apart.line_rows(path)
        key = (transcript.project_dir, transcript.session_id)
        assert one.insight_store.insight(*key) == apart.insight_store.insight(*key)
        assert one.insight_store.links(*key) == apart.insight_store.links(*key)
        state = one.insight_store.state(*key)
        assert state == apart.insight_store.state(*key)


def test_one_pass_writes_search_line_index_and_insight(
    root: Path, indexes: tuple[Indexes, Indexes]
) -> None:
    one, apart = indexes
    indexer = one_pass(one)
    assert indexer.stats.entries > 2000
    assert one.lines.bytes_read == 0, "the line index was fed, it read nothing itself"
    parsed = one.insight.lines_read
    assert parsed > 2000
    each_apart(apart)
    assert_same(one, apart)
    # Fed up to date: asking insight and the line index again reads nothing.
    for transcript in one.transcripts.list(None):
        one.insight.refresh(transcript)
        with Path(transcript.location).open("rb") as handle:
            one.lines.ensure(
                os.path.relpath(transcript.location, root), LocalSource(handle.fileno())
            )
    assert one.insight.lines_read == parsed
    assert one.lines.bytes_read == 0
    sought = one.lines.store.lines_for("proj/grown.jsonl", 1, ["u-0", "u-1", "u-2", "u-39"])
    assert [line.uuid for line in sought] == ["u-0", "u-1", "u-2", "u-39"]
    assert [line.images for line in sought] == [0, 1, 0, 0]

    # The files grow: the tail ends, lines follow; the next pass goes on from each index's end.
    with (root / "proj" / "grown.jsonl").open("ab") as handle:
        handle.write(b"\n" + b"\n".join(entry(n, f"later number{n}") for n in range(41, 60)))
        handle.write(b"\n" + image_entry(60) + b"\n")
    before = indexer.stats.bytes_read
    indexer.catch_up()
    assert 0 < indexer.stats.bytes_read - before < 20_000, "only the new lines were read"
    each_apart(apart)
    assert_same(one, apart)
    assert one.lines.bytes_read == 0
