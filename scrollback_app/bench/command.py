"""The `scrollback bench` subcommand: its flags, and running it.

`add_arguments` declares the flags on the subparser `scrollback_app.cli` builds;
`run(args)` runs the preset (`--quick` or full) with the flags' overrides,
prints the rich table (and the Markdown one with `--markdown`), and writes
the JSON results to `--json-out` (default `bench-results.json`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console

from scrollback_app.bench.figures import markdown_into, markdown_table, render_table, to_json
from scrollback_app.bench.runner import MB, MIB, BenchConfig, run_bench, scaled

DEFAULT_JSON_OUT = Path("bench-results.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench flags."""
    parser.add_argument("--quick", action="store_true", help="small sizes (2 MB vs 40 MB), for CI")
    parser.add_argument("--small-mb", type=float, help="the small transcript, MB (5; quick 2)")
    parser.add_argument("--large-mb", type=float, help="the large transcript, MB (500; quick 40)")
    parser.add_argument(
        "--big-images-mb", type=float, help="the 10 MB-image transcript, MB (250; quick 40)"
    )
    parser.add_argument(
        "--image-kb", type=float, help="raw bytes of the ~1 MB images, KB (750 = ~1 MB base64)"
    )
    parser.add_argument(
        "--index-mb", type=float, help="the line index transcript, MB (1000; quick 24)"
    )
    parser.add_argument("--stripper-mb", type=float, help="bytes the stripper bench strips, MiB")
    parser.add_argument(
        "--search-mb", type=float, help="transcripts the search bench indexes, MB (1000; quick 20)"
    )
    parser.add_argument(
        "--search-build-mb",
        type=float,
        help="text sessions the search build figure indexes, MB (200; quick 10)",
    )
    parser.add_argument(
        "--insight-mb", type=float, help="the session the insight bench indexes, MB (500; quick 20)"
    )
    parser.add_argument(
        "--slim-mb", type=float, help="the session the slim bench copies, MB (2000; quick 20)"
    )
    parser.add_argument(
        "--bucket-mb",
        type=float,
        help="the transcript read from a bucket and from disk, MB (300; quick 10)",
    )
    parser.add_argument("--repeats", type=int, help="interleaved repeats per figure (15; quick 7)")
    parser.add_argument(
        "--throughput-seconds", type=float, help="seconds per throughput sample (5; quick 1.5)"
    )
    parser.add_argument(
        "--json-out", type=Path, default=DEFAULT_JSON_OUT, help="where to write the JSON results"
    )
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temp dir)")
    parser.add_argument(
        "--keep-files", action="store_true", help="keep the generated transcripts and state"
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="also print the table as Markdown (docs/benchmarks.md)",
    )
    parser.add_argument(
        "--markdown-into",
        type=Path,
        metavar="PAGE",
        help="write the Markdown table into PAGE between its generated-table comments "
        "(docs/benchmarks.md), the rest of it unchanged",
    )


def _mb(value: float | None) -> int | None:
    return None if value is None else int(value * MB)


def _mib(value: float | None) -> int | None:
    return None if value is None else int(value * MIB)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The preset the flags pick, with their overrides."""
    preset = BenchConfig.quick() if args.quick else BenchConfig.full()
    return scaled(
        preset,
        small_bytes=_mb(args.small_mb),
        large_bytes=_mb(args.large_mb),
        big_transcript_bytes=_mb(args.big_images_mb),
        stripper_bytes=_mib(args.stripper_mb),
        index_bytes=_mb(args.index_mb),
        search_bytes=_mb(args.search_mb),
        search_build_bytes=_mb(args.search_build_mb),
        insight_bytes=_mb(args.insight_mb),
        slim_bytes=_mb(args.slim_mb),
        bucket_bytes=_mb(args.bucket_mb),
        image_bytes=None if args.image_kb is None else int(args.image_kb * 1000),
        repeats=args.repeats,
        throughput_seconds=args.throughput_seconds,
        workdir=args.workdir,
        keep_files=args.keep_files or None,
    )


def run(args: argparse.Namespace) -> int:
    """Run the benchmarks; 0 once every figure was produced (met or not)."""
    config = config_from_args(args)
    if args.markdown_into is not None:
        # A page it cannot write into is said before the run, not after it.
        markdown_into(args.markdown_into.read_text(), "")
    console = Console()
    if not console.is_terminal:
        console = Console(width=180)
    started = time.perf_counter()
    figures = run_bench(config, Console(stderr=True))
    seconds = time.perf_counter() - started
    render_table(
        figures, f"scrollback bench ({config.label}, {seconds:.0f} s, medians)", console=console
    )
    if args.markdown:
        console.print(markdown_table(figures), markup=False, highlight=False, soft_wrap=True)
    if args.markdown_into is not None:
        page = args.markdown_into.read_text()
        args.markdown_into.write_text(markdown_into(page, markdown_table(figures)))
        console.print(f"table written into {args.markdown_into}", markup=False, highlight=False)
    args.json_out.write_text(
        json.dumps(to_json(figures, config.settings(), seconds), indent=2) + "\n"
    )
    console.print(f"results written to {args.json_out}", markup=False, highlight=False)
    return 0
