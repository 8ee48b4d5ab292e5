"""Search figures: index build throughput vs the newline-scan floor, and query latency.

Generates a root of many transcripts (Claude Code-like lines: text turns with
words drawn from a Zipf-distributed vocabulary, tool calls and results, and a
pasted image every so often), then:

- index build: the history service's indexer (`SearchIndexer` into the
  SQLite FTS5 index, in this process) over the whole root, in MB of
  transcript per second, beside a bare newline scan of the same files (the
  floor: reading the bytes and finding the line ends). Reported, no target.
- index build vs the engine (`search_build_vs_fts5`): text sessions (no
  image) made searchable to their last line as the history server does it,
  one pass per file writing the search index, the line index and insight
  together (`SearchIndexer` given both), beside inserting the same texts (the
  index's entry bodies) into a bare SQLite FTS5 table in one transaction,
  each bare insert timed before and after the build. Target: >= 0.5x.
- query latency: a history server subprocess on that index answers Search
  calls (common, middling and rare words, two-word queries, a phrase, a
  prefix, a role filter, a session filter), one at a time; p50 and p99 of
  whole 20-hit pages beside the p50 of a Health check on the same channel
  (the floor of one gRPC call). Targets: p50 < 50 ms, p99 < 200 ms.
- what another tenant's data tells: on a root where alice has 30,000 entries
  with one word and bob a few of his own, bob's Search for that word (no hit
  for him) vs for a word that occurs nowhere, words and prefixes alternating,
  on a history server with auth. Target about 1x (<= 1.5x): the time of an
  empty answer does not tell how often a word occurs where bob cannot look.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import shutil
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import tantivy

from history_service.search.embedded import WRITER_HEAP, TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from scrollback.directory import DirectoryRoot
from scrollback.search.v1 import search_pb2, search_pb2_grpc
from scrollback_app.bench import procs, search_engines, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.search_engines import one_pass_build

VOCABULARY = 20_000
PROJECTS = 10
IMAGE_EVERY = 20
IMAGE_BYTES = 45_000
HIDDEN_ENTRIES = 30_000
TOKENS = {"alice": "bench-search-alice", "bob": "bench-search-bob"}
# (alice's word, in every entry of hers; a word in no entry): as words and as prefixes
HIDDEN_PROBES = (("quince", "zzyzx"), ("quinc*", "zzyzx*"))


def _words() -> tuple[list[str], list[float]]:
    rng = random.Random(17)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(VOCABULARY)})
    rng.shuffle(words)
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))
    return words, weights


def write_root(
    root: Path, total_bytes: int, files: int, *, image_every: int | None = IMAGE_EVERY
) -> tuple[int, list[str]]:
    """Transcripts of about `total_bytes` in all (an image every `image_every` lines, None:
    text only); returns (bytes written, words by rank)."""
    words, weights = _words()
    rng = random.Random(5)
    per_file = max(1, total_bytes // files)
    written = 0
    for number in range(files):
        project = root / f"proj-{number % PROJECTS}"
        project.mkdir(parents=True, exist_ok=True)
        path = project / f"session-{number}.jsonl"
        size = 0
        line_number = 0
        second = 1_700_000_000 + number * 100_000
        with path.open("wb") as handle:
            while size < per_file:
                line_number += 1
                text = " ".join(rng.choices(words, cum_weights=weights, k=rng.randint(20, 160)))
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(second + line_number))
                role = "user" if line_number % 2 else "assistant"
                content: list[dict[str, object]] = [{"type": "text", "text": text}]
                if line_number % 7 == 0:
                    content.append(
                        {
                            "type": "tool_use",
                            "id": f"t{line_number}",
                            "name": "Bash",
                            "input": {"command": " ".join(rng.choices(words, k=6))},
                        }
                    )
                if image_every is not None and line_number % image_every == 0:
                    data = base64.b64encode(os.urandom(IMAGE_BYTES)).decode()
                    content.append(
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": data},
                        }
                    )
                line = (
                    orjson.dumps(
                        {
                            "type": role,
                            "uuid": f"{number:08x}-0000-4000-8000-{line_number:012x}",
                            "sessionId": f"session-{number}",
                            "timestamp": stamp,
                            "message": {"role": role, "content": content},
                        }
                    )
                    + b"\n"
                )
                handle.write(line)
                size += len(line)
        written += size
    return written, words


def newline_scan(root: Path) -> int:
    """The floor: read every transcript and count its line ends."""
    count = 0
    for path in root.rglob("*.jsonl"):
        with path.open("rb", buffering=0) as handle:
            while chunk := handle.read(1 << 20):
                count += chunk.count(b"\n")
    return count


def bare_fts5_insert(texts: list[str], path: Path) -> float:
    """Seconds to insert `texts` into a bare FTS5 table (default tokenizer) in one transaction."""
    path.unlink(missing_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("CREATE VIRTUAL TABLE bare USING fts5 (body)")
        started = time.perf_counter()
        connection.execute("BEGIN")
        connection.executemany("INSERT INTO bare (body) VALUES (?)", ((text,) for text in texts))
        connection.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        connection.close()


def measure_build(
    work: Path, total_bytes: int, files: int, log: Callable[[str], None]
) -> list[Figure]:
    """The one-pass index build of text sessions vs a bare FTS5 insert of the same texts."""
    root = work / "search-build-root"
    state = work / "state-search-build"
    written, words = write_root(root, total_bytes, files, image_every=None)
    log(f"search build: {written / 1e6:,.0f} MB of text sessions in {files} transcripts")
    texts_db = work / "search-build-bare.sqlite"
    seconds, entries = one_pass_build(root, state)
    built = TantivySearchIndex(state)
    try:
        texts = [str(doc["body"]) for doc in built.stored_entries()]
    finally:
        built.close()
    # The bare inserts before and after the build's own time, so all see the same machine.
    bare = statistics.median([bare_fts5_insert(texts, texts_db), bare_fts5_insert(texts, texts_db)])
    texts_db.unlink(missing_ok=True)
    engine = statistics.median(
        [bare_tantivy_insert(texts, work / "bare-tantivy") for _ in range(2)]
    )
    old_state = work / "state-search-build-fts5"
    old_seconds, _ = one_pass_build(root, old_state, fts5=True)
    log(
        f"search build: {entries:,} entries in {seconds:.1f} s, bare FTS5 {bare:.1f} s,"
        f" bare Tantivy {engine:.1f} s, the FTS5 index of earlier versions {old_seconds:.1f} s"
    )
    engines = [
        *search_engines.query_latency(state, old_state, words),
        search_engines.build_memory(root, work / "state-search-build-rss"),
    ]
    return [
        *engines,
        Figure(
            key="search_build_vs_tantivy",
            name=(
                f"search index build of {written / 1e6:,.0f} MB of text sessions vs the same"
                " texts into a bare Tantivy index"
            ),
            figure=written / 1e6 / seconds,
            baseline=written / 1e6 / engine,
            unit="MB/s",
            baseline_label="bare Tantivy insert",
            ratio=engine / seconds,
            target=Target(">=", 0.5),
            note=f"the FTS5 index of earlier versions: {written / 1e6 / old_seconds:,.1f} MB/s",
        ),
        Figure(
            key="search_build_vs_fts5",
            name=(
                f"search index build of {written / 1e6:,.0f} MB of text sessions (search, line index"
                " and insight in one pass) vs the same texts into a bare FTS5 table"
            ),
            figure=written / 1e6 / seconds,
            baseline=written / 1e6 / bare,
            unit="MB/s",
            baseline_label="bare FTS5 insert",
            ratio=bare / seconds,
            target=Target(">=", 1.0),
            note=f"{entries:,} entries, {sum(map(len, texts)) / 1e6:,.0f} MB of text",
        ),
    ]


def bare_tantivy_insert(texts: list[str], path: Path) -> float:
    """Seconds to add `texts` to a bare Tantivy index (one text field, default tokenizer,
    the embedded index's writer settings) and commit."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=True)
    index = tantivy.Index(builder.build(), str(path))
    started = time.perf_counter()
    writer = index.writer(WRITER_HEAP, max(1, min(os.cpu_count() or 1, 4)))
    for text in texts:
        writer.add_document(tantivy.Document(body=text))
    writer.commit()
    writer.wait_merging_threads()
    seconds = time.perf_counter() - started
    shutil.rmtree(path, ignore_errors=True)
    return seconds


def _queries(words: list[str]) -> list[search_pb2.SearchRequest]:
    common, middling, rare = words[0], words[300], words[8000]
    return [
        search_pb2.SearchRequest(query=common),
        search_pb2.SearchRequest(query=middling),
        search_pb2.SearchRequest(query=rare),
        search_pb2.SearchRequest(query=f"{middling} {words[40]}"),
        search_pb2.SearchRequest(query=f'"{words[1]} {words[2]}"'),
        search_pb2.SearchRequest(query=words[120][:3] + "*"),
        search_pb2.SearchRequest(query=words[60], roles=["assistant"]),
        search_pb2.SearchRequest(query=words[10], session_id="session-3"),
        search_pb2.SearchRequest(query=f"{rare} {common}"),
    ]


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(
    work: Path, total_bytes: int, files: int, samples: int, log: Callable[[str], None]
) -> list[Figure]:
    """The search figures, on a root of about `total_bytes` under `work` (and the tenants')."""
    root = work / "search-root"
    state = work / "state-search"
    written, words = write_root(root, total_bytes, files)
    log(f"search: {written / 1e6:,.0f} MB in {files} transcripts")
    scan_seconds = []
    for _ in range(3):
        started = time.perf_counter()
        newline_scan(root)
        scan_seconds.append(time.perf_counter() - started)
    index = TantivySearchIndex(state)
    try:
        indexer = SearchIndexer(DirectoryRoot(root), index, max_line_size=16 * 1024 * 1024)
        started = time.perf_counter()
        indexer.catch_up()
        index_seconds = time.perf_counter() - started
        entries = indexer.stats.entries
    finally:
        index.close()
    index_rate = written / 1e6 / index_seconds
    scan_rate = written / 1e6 / statistics.median(scan_seconds)
    log(f"search: indexed {entries:,} entries in {index_seconds:.1f} s")
    figures = [
        Figure(
            key="search_index_build",
            name=f"search index build over {written / 1e6:,.0f} MB vs a newline scan",
            figure=index_rate,
            baseline=scan_rate,
            unit="MB/s",
            baseline_label="newline scan",
            ratio=index_rate / scan_rate,
            target=Target(),
            note=f"{entries:,} entries",
        )
    ]
    server = procs.history_server(root, state, search_indexing=True)
    async with server, services.channel(server.addr) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        queries = _queries(words)

        async def search(request: search_pb2.SearchRequest) -> int:
            hits = 0
            async for message in stub.Search(request):
                hits += message.HasField("hit")
            return hits

        found = 0
        for request in queries:  # warm: the first call of each shape pays for page-ins
            found += await search(request)
        assert found, "the index answers"
        latencies, floor = await services.beside_health_check(
            channel, samples, lambda number: search(queries[number % len(queries)])
        )
    floor_ms = statistics.median(floor)
    p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    for key, label, value, ceiling in (
        ("search_query_p50", "p50", p50, 50.0),
        ("search_query_p99", "p99", p99, 200.0),
    ):
        figures.append(
            Figure(
                key=key,
                name=f"Search latency {label} (20-hit pages) on {written / 1e6:,.0f} MB",
                figure=value,
                baseline=floor_ms,
                unit="ms",
                baseline_label="gRPC health check p50",
                ratio=value / floor_ms,
                target=Target(figure_max=ceiling),
                note=f"{len(latencies)} queries of {len(queries)} shapes",
            )
        )
    figures.append(await measure_hidden(work, HIDDEN_ENTRIES, samples, log))
    return figures


def write_tenants(root: Path, tokens: Path, entries: int) -> None:
    """alice's project: `entries` lines with "quince"; bob's: a few lines of his own."""
    for project, count, text in (("alice", entries, "a ripe quince"), ("bob", 20, "an apple")):
        directory = root / project
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / f"{project}-session.jsonl").open("wb") as handle:
            for number in range(count):
                line = {
                    "type": "user",
                    "uuid": f"{number:08x}-0000-4000-8000-000000000000",
                    "sessionId": f"{project}-session",
                    "timestamp": time.strftime(
                        "%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(1_700_000_000 + number)
                    ),
                    "message": {"role": "user", "content": f"{text} number {number}"},
                }
                handle.write(orjson.dumps(line) + b"\n")
    entries_of = [{"token": TOKENS[name], "principal": name, "projects": [name]} for name in TOKENS]
    tokens.write_text(json.dumps({"tokens": entries_of}))


async def measure_hidden(
    work: Path, entries: int, samples: int, log: Callable[[str], None]
) -> Figure:
    """bob's empty Search for a word frequent in alice's entries vs for an absent word."""
    root = work / "search-tenants"
    state = work / "state-search-tenants"
    tokens = work / "search-tokens.json"
    write_tenants(root, tokens, entries)
    index = TantivySearchIndex(state)
    try:
        SearchIndexer(DirectoryRoot(root), index, max_line_size=1024 * 1024).catch_up()
    finally:
        index.close()
    log(f"search: alice's {entries:,} entries indexed")
    server = procs.history_server(root, state, auth_tokens=tokens)
    async with server, services.channel(server.addr) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)

        async def hits(query: str, who: str) -> int:
            metadata = (("authorization", f"Bearer {TOKENS[who]}"),)
            count = 0
            async for message in stub.Search(
                search_pb2.SearchRequest(query=query, page_size=20), metadata=metadata
            ):
                count += message.HasField("hit")
            return count

        assert await hits(HIDDEN_PROBES[0][0], "alice") == 20, "alice's word is indexed"
        assert await hits("apple", "bob") == 20, "bob's own words are indexed"

        def case(column: int) -> services.TimedCase:
            async def run(round_number: int) -> float | None:
                query = HIDDEN_PROBES[round_number % len(HIDDEN_PROBES)][column]
                start = time.perf_counter()
                assert await hits(query, "bob") == 0
                return time.perf_counter() - start

            return run

        await services.interleave({"warm": case(0), "warm absent": case(1)}, 4)
        medians = await services.interleave({"frequent": case(0), "absent": case(1)}, samples)
    return Figure(
        key="search_hidden_word_vs_absent",
        name=f"bob's empty Search, a word in {entries:,} of alice's entries vs an absent one",
        figure=medians["frequent"] * 1e3,
        baseline=medians["absent"] * 1e3,
        unit="ms",
        baseline_label="absent word",
        ratio=medians["frequent"] / medians["absent"],
        target=Target("<=", 1.5),
        note="target about 1x: timing does not tell how often a hidden word occurs",
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.search [--mb N] [--build-mb N] [--build-only]`: these alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=1000.0, help="MB of transcripts (1000)")
    parser.add_argument("--files", type=int, default=200, help="transcripts (200)")
    parser.add_argument("--samples", type=int, default=300, help="queries timed (300)")
    parser.add_argument(
        "--build-mb", type=float, default=200.0, help="text sessions the build figure indexes (200)"
    )
    parser.add_argument(
        "--build-only", action="store_true", help="only the build vs bare FTS5 figure"
    )
    args = parser.parse_args(argv)

    async def figures(work: Path, log: Callable[[str], None]) -> list[Figure]:
        build = measure_build(work, int(args.build_mb * 1e6), args.files, log)
        if args.build_only:
            return build
        return [*build, *await measure(work, int(args.mb * 1e6), args.files, args.samples, log)]

    return run_alone("scrollback search bench", figures)


if __name__ == "__main__":
    raise SystemExit(main())
