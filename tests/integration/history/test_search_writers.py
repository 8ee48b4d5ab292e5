"""The embedded index under two indexers, a crash, and a second source.

Two indexers on one root and state dir (as two workers of one service are)
index every entry exactly once: Tantivy lets one writer hold a project's
index, and the other leaves that project alone until it is free. An indexer
killed (SIGKILL) in the middle of a pass leaves an index that opens, and the
next indexer catches up to every entry, exactly once: entries and their
file's progress were committed together. A Codex rollout's prompt ranks
above the same words in its tool output, and a line appended to a served
transcript is found within 2 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import grpc

from history_service.config import HistoryConfig
from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from history_service.server import start_history_server
from scrollback.directory import DirectoryRoot
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from tests.support.codex import Rollout, write_rollout

PROJECTS = 4
FILES = 6
LINES = 300


def _write_root(root: Path) -> int:
    words = " ".join(f"word{i}" for i in range(300))
    for project in range(PROJECTS):
        directory = root / f"proj-{project}"
        directory.mkdir(parents=True)
        for number in range(FILES):
            with (directory / f"s{number}.jsonl").open("w") as out:
                for line in range(LINES):
                    entry = {
                        "type": "user",
                        "uuid": f"u{project}-{number}-{line}",
                        "timestamp": "2026-05-01T10:00:00.000Z",
                        "message": {"role": "user", "content": f"{line} {words}"},
                    }
                    out.write(json.dumps(entry) + "\n")
    return PROJECTS * FILES * LINES


def _uuids(state: Path) -> Counter[str]:
    index = TantivySearchIndex(state)
    try:
        return Counter(str(doc["uuid"]) for doc in index.stored_entries())
    finally:
        index.close()


def test_two_indexers_on_one_root_index_each_entry_once(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    total = _write_root(root)
    indexes = [TantivySearchIndex(state) for _ in range(2)]
    indexers = [
        SearchIndexer(DirectoryRoot(root), index, max_line_size=1 << 20) for index in indexes
    ]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(indexer: SearchIndexer) -> None:
        try:
            start.wait()
            for _ in range(4):
                indexer.catch_up()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(indexer,)) for indexer in indexers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Both worked, on different projects: neither wrote what the other held.
    entries = [indexer.stats.entries for indexer in indexers]
    assert sum(entries) == total and all(entries), entries
    for index in indexes:
        index.close()
    counted = _uuids(state)
    assert len(counted) == total and set(counted.values()) == {1}


_CHILD = """
import sys
from pathlib import Path
from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from scrollback.directory import DirectoryRoot
index = TantivySearchIndex(Path(sys.argv[2]))
SearchIndexer(DirectoryRoot(Path(sys.argv[1])), index, max_line_size=1 << 20).catch_up()
print("done", flush=True)
"""


def test_an_indexer_killed_mid_pass_leaves_an_index_that_catches_up(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    total = _write_root(root)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root), str(state)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.PIPE,
    )
    try:
        # Killed once some of its work is committed and before it has all been.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (state / "search").is_dir() and sum(_uuids(state).values()) > 0:
                break
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.stdout is not None and b"done" not in child.stdout.read()
    before = sum(_uuids(state).values())
    assert 0 < before < total
    # It opens, its writer locks are free, and the next pass catches up, exactly once.
    index = TantivySearchIndex(state)
    try:
        indexer = SearchIndexer(DirectoryRoot(root), index, max_line_size=1 << 20)
        indexer.catch_up()
        assert indexer.stats.entries == total - before
        assert index.complete()
    finally:
        index.close()
    counted = _uuids(state)
    assert len(counted) == total and set(counted.values()) == {1}


async def test_codex_prompt_ranks_first_and_new_lines_are_found_within_2_s(
    tmp_path: Path,
) -> None:
    codex = tmp_path / "codex" / "sessions"
    prompted = Rollout("0199a000-0000-7000-8000-00000000000a")
    prompted.meta()
    prompted.user("Add rate limiting to the upload endpoint", [])
    prompted.assistant("Adding it.")
    dumps = Rollout("0199a000-0000-7000-8000-00000000000b")
    dumps.meta()
    dumps.user("run the tests", [])
    filler = " ".join(f"output line {n}" for n in range(200))
    for call in range(4):
        dumps.tool_call(f"c{call}", "pytest", f"{filler} rate limiting {filler}", [])
    write_rollout(codex, prompted)
    path = write_rollout(codex, dumps)
    (tmp_path / "root").mkdir()
    config = HistoryConfig.from_env(
        {},
        transcripts=tmp_path / "root",
        state_dir=tmp_path / "state",
        addr="127.0.0.1:0",
        codex_sessions=codex,
    )
    assert config.search_interval_seconds <= 1.0  # the default the 2 s below relies on
    server = await start_history_server(config)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = search_pb2_grpc.SearchServiceStub(channel)

    async def sessions(query: str) -> list[str]:
        call = stub.Search(search_pb2.SearchRequest(query=query))
        return [m.hit.session_id async for m in call if m.HasField("hit")]

    try:
        deadline = time.monotonic() + 20
        while True:
            found = await sessions('"rate limiting"')
            if len(found) == 5 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert len(found) == 5 and prompted.session_id in found[0]
        # A line appended now is found within 2 s.
        dumps.assistant("the kumquat test passes")
        with path.open("ab") as handle:
            handle.write(dumps.lines[-1] + b"\n")
        written = time.monotonic()
        while True:
            seen = await sessions("kumquat")
            waited = time.monotonic() - written
            if seen or waited > 5:
                break
            await asyncio.sleep(0.02)
        assert seen and waited < 2.0, waited
    finally:
        await channel.close()
        await server.stop(0.5)
