"""The embedded index beside the FTS5 index of earlier versions, on the same texts.

- build memory (`search_build_rss`): the one-pass build (Tantivy) in a process of
  its own; its peak RSS over its RSS once imported and opened (idle). Target:
  <= +200 MB.
- query latency (`search_p50_vs_fts5`, `search_p99_vs_fts5`): the same queries
  (a common, a middling and a rare word, two words, a phrase, a prefix, a role
  filter) against both indexes in this process, interleaved, 20 hits each:
  Tantivy most relevant first (the default order) beside FTS5 newest first (its
  only order). Reported: relevance ranks every match, newest first walks a
  page.
"""

from __future__ import annotations

import multiprocessing
import resource
import statistics
import threading
import time
from pathlib import Path

from history_service.insight import InsightIndex
from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from history_service.search.query import Filters, parse_query
from history_service.search.store import Order, Page, SearchIndex
from history_service.store.insight import SqliteInsightStore
from scrollback.directory import DirectoryRoot
from scrollback.server.service_config import open_line_index
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.fts5_index import SqliteSearchIndex

RSS_TARGET_MB = 200


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 1e6


def one_pass_build(root: Path, state: Path, *, fts5: bool = False) -> tuple[float, int]:
    """(seconds, entries): the root indexed for search (Tantivy, or the FTS5 index of
    earlier versions), line index and insight in one pass."""
    transcripts = DirectoryRoot(root)
    index: SearchIndex = SqliteSearchIndex(state) if fts5 else TantivySearchIndex(state)
    line_index = open_line_index(state, "")
    insight_store = SqliteInsightStore(state)
    try:
        indexer = SearchIndexer(
            transcripts,
            index,
            max_line_size=16 * 1024 * 1024,
            line_index=line_index,
            insight=InsightIndex(transcripts, insight_store, max_line_size=16 * 1024 * 1024),
        )
        started = time.perf_counter()
        indexer.catch_up()
        index.close()  # what is left committed: part of the build
        return time.perf_counter() - started, indexer.stats.entries
    finally:
        insight_store.close()
        line_index.close()
        index.close()


def _anon_mb() -> float:
    """This process's anonymous resident memory (not the mapped index files' page cache)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1e3
    return 0.0


def _build_in_child(root: str, state: str) -> tuple[float, float, float, float, float]:
    """(seconds, idle MB, peak MB, idle anonymous MB, peak anonymous MB) of a one-pass
    build, measured in this (child) process; anonymous memory sampled every 20 ms."""
    TantivySearchIndex(Path(state)).close()  # imported and opened: the idle figure
    idle, idle_anon = _rss_mb(), _anon_mb()
    peaks = [idle_anon]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peaks.append(_anon_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        seconds, _ = one_pass_build(Path(root), Path(state))
    finally:
        done.set()
        sampler.join()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    return seconds, idle, peak, idle_anon, max(peaks)


def build_memory(root: Path, state: Path) -> Figure:
    """The peak RSS of a one-pass build over its idle RSS (a fresh process and state)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        seconds, idle, peak, idle_anon, peak_anon = pool.apply(
            _build_in_child, (str(root), str(state))
        )
    return Figure(
        key="search_build_rss",
        name="peak RSS of the one-pass search build (Tantivy) over the same process idle",
        figure=peak - idle,
        baseline=idle,
        unit="MB",
        baseline_label="idle RSS",
        ratio=peak / idle,
        target=Target(figure_max=RSS_TARGET_MB),
        note=(
            f"peak {peak:,.0f} MB; anonymous memory (without the index files it maps)"
            f" +{peak_anon - idle_anon:,.0f} MB over idle; the build took {seconds:.1f} s"
        ),
    )


def _queries(words: list[str]) -> list[tuple[str, Filters]]:
    common, middling, rare = words[0], words[300], words[8000]
    return [
        (common, Filters()),
        (middling, Filters()),
        (rare, Filters()),
        (f"{middling} {words[40]}", Filters()),
        (f'"{words[1]} {words[2]}"', Filters()),
        (words[120][:3] + "*", Filters()),
        (words[60], Filters(roles=("assistant",))),
    ]


def _timed(index: SearchIndex, query: str, filters: Filters, order: Order) -> float:
    started = time.perf_counter()
    index.search(parse_query(query), filters, None, Page(order), 20)
    return time.perf_counter() - started


def query_latency(tantivy_state: Path, fts5_state: Path, words: list[str]) -> list[Figure]:
    """p50 and p99 of the same queries on both indexes (see the module docstring)."""
    new = TantivySearchIndex(tantivy_state)
    old = SqliteSearchIndex(fts5_state)
    samples: dict[str, list[float]] = {"new": [], "old": []}
    try:
        for _ in range(3):  # warm both
            for query, filters in _queries(words):
                _timed(new, query, filters, Order.RELEVANCE)
                _timed(old, query, filters, Order.NEWEST)
        for _ in range(30):
            for query, filters in _queries(words):
                samples["new"].append(_timed(new, query, filters, Order.RELEVANCE))
                samples["old"].append(_timed(old, query, filters, Order.NEWEST))
    finally:
        new.close()
        old.close()
    figures = []
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        ours, theirs = (
            statistics.quantiles(samples[k], n=100)[int(fraction * 100) - 1] * 1e3
            for k in ("new", "old")
        )
        figures.append(
            Figure(
                key=f"search_{label}_vs_fts5",
                name=(
                    f"search {label} in process, Tantivy most relevant first vs the FTS5 index"
                    " of earlier versions newest first (same texts, same queries)"
                ),
                figure=ours,
                baseline=theirs,
                unit="ms",
                baseline_label="FTS5 newest first",
                ratio=ours / theirs,
                target=Target(),
                note=f"{len(samples['new'])} queries each",
            )
        )
    return figures
