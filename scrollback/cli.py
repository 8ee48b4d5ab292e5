"""The `scrollback` command: one entry point for running and operating the pair.

- `scrollback up`: both services in the foreground on embedded defaults
  (SQLite state and local files), until Ctrl-C or SIGTERM.
- `scrollback bench`: the benchmarks, each figure beside its baseline.

Flags override the environment (CONTRACT section 6). Exit codes: 0 success,
1 failure of the work, 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

_ENV_FLAGS = {
    "transcripts": "SCROLLBACK_TRANSCRIPTS",
    "state": "SCROLLBACK_STATE",
    "history_addr": "SCROLLBACK_HISTORY_ADDR",
    "media_addr": "SCROLLBACK_MEDIA_ADDR",
}


def _apply_flags_to_env(args: argparse.Namespace) -> None:
    """Flags of the same names override the environment the configs read."""
    for attribute, variable in _ENV_FLAGS.items():
        value = getattr(args, attribute, None)
        if value:
            os.environ[variable] = str(value)


async def _run_up(insecure: bool) -> int:
    from history_service.server import start_history_server
    from media_service.server import start_media_server

    from history_service.config import HistoryConfig
    from media_service.config import MediaConfig
    from scrollback.grpc_support import wait_for_shutdown_signal

    history_config = HistoryConfig.from_env()
    media_config = MediaConfig.from_env()
    if insecure:
        history_config = dataclasses.replace(history_config, insecure=True)
        media_config = dataclasses.replace(media_config, insecure=True)
    history = await start_history_server(history_config)
    try:
        media = await start_media_server(media_config)
    except BaseException:
        await history.stop()
        raise
    log = logging.getLogger("scrollback")
    log.info("history service listening on port %d", history.port)
    log.info("media service listening on port %d", media.port)
    print(
        f"scrollback up: history on port {history.port}, media on port {media.port}; Ctrl-C stops",
        flush=True,
    )
    try:
        await wait_for_shutdown_signal()
    finally:
        await asyncio.gather(history.stop(), media.stop())
    return EXIT_OK


def _cmd_up(args: argparse.Namespace) -> int:
    _apply_flags_to_env(args)
    return asyncio.run(_run_up(args.insecure))


def _cmd_bench(args: argparse.Namespace) -> int:
    from scrollback.bench.stripper import measure

    total = (8 << 20) if args.quick else (256 << 20)
    result = measure(total_bytes=total, repeats=5 if args.quick else 9)
    print(
        f"{result.name}: {result.figure:,.0f} {result.unit} vs {result.baseline:,.0f} {result.unit}"
        f" = {result.ratio:.2f} (target {result.target})"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `scrollback` command."""
    parser = argparse.ArgumentParser(prog="scrollback", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run both services in the foreground")
    up.add_argument("--transcripts", help="transcripts root (SCROLLBACK_TRANSCRIPTS)")
    up.add_argument("--state", help="state directory (SCROLLBACK_STATE)")
    up.add_argument("--history-addr", help="history service address (SCROLLBACK_HISTORY_ADDR)")
    up.add_argument("--media-addr", help="media service address (SCROLLBACK_MEDIA_ADDR)")
    up.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without auth"
    )
    up.set_defaults(handler=_cmd_up)

    bench = commands.add_parser("bench", help="run the benchmarks against their baselines")
    bench.add_argument("--quick", action="store_true", help="small sizes, for CI")
    bench.set_defaults(handler=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
