"""Stopping search indexing while a pass is running in its thread.

The indexer's pass runs in a thread; the history server closes the search
index on stop. Closing SQLite connections that the pass is still using crashes
the process (seen as a segmentation fault in the suite), so `SearchParts.stop`
must wait for the pass: the index is never closed while a call is inside it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from history_service.search.store import EntryRow
from history_service.server import SearchParts
from scrollback.directory import DirectoryRoot


class SlowWritingIndex(TantivySearchIndex):
    """The real embedded index, with slow batch writes and a count of calls inside it."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir)
        self.inside = 0
        self.inside_at_close: int | None = None
        self._count = threading.Lock()

    def add_entries(
        self, file_id: int, rows: Sequence[EntryRow], start: int, indexed_to: int
    ) -> bool:
        with self._count:
            self.inside += 1
        try:
            time.sleep(0.05)  # a batch write that takes a while
            return super().add_entries(file_id, rows, start, indexed_to)
        finally:
            with self._count:
                self.inside -= 1

    def close(self) -> None:
        with self._count:
            self.inside_at_close = self.inside
        super().close()


def _write_root(root: Path, files: int, lines: int) -> None:
    project = root / "proj"
    project.mkdir(parents=True)
    words = " ".join(f"word{i}" for i in range(2000))
    for number in range(files):
        with (project / f"s{number}.jsonl").open("w") as out:
            for line in range(lines):
                entry = {
                    "type": "user",
                    "uuid": f"u{number}-{line}",
                    "timestamp": "2026-05-01T10:00:00.000Z",
                    "message": {"role": "user", "content": f"{line} {words}"},
                }
                out.write(json.dumps(entry) + "\n")


async def test_stop_waits_for_the_pass_before_closing_the_index(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _write_root(root, files=40, lines=600)  # many batches: a pass takes seconds
    index = SlowWritingIndex(tmp_path / "state")
    indexer = SearchIndexer(DirectoryRoot(root), index, max_line_size=16 << 20)
    parts = SearchParts(index, indexer)
    parts.task = asyncio.create_task(indexer.run(60))
    for _ in range(1000):  # until a batch write is under way
        if index.inside:
            break
        await asyncio.sleep(0.005)
    assert index.inside, "caught mid-pass"
    await parts.stop()
    assert index.inside_at_close == 0, "the index was closed under a running pass"
    assert indexer.stats.passes == 0, "the pass ended early, unfinished"
