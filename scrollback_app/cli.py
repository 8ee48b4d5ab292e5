"""The `scrollback` command: one entry point for running and operating the pair.

- `scrollback up`: both services in the foreground on embedded defaults
  (SQLite state and local files), until Ctrl-C or SIGTERM.
- `scrollback up --gateway`: the same, plus the HTTP gateway and viewer (SCROLLBACK_GATEWAY_ADDR).
- `scrollback gateway`: the HTTP gateway alone, a client of running services.
- `scrollback bench`: the benchmarks, each figure beside its baseline.
- `scrollback loadtest [--seconds S] [--clients N]`: a bounded load test on loopback.
- `scrollback sessions`: the sessions under the root, newest first.
- `scrollback window SESSION [--older TOKEN | --oldest-first] [--page-size N]`: one page.
- `scrollback media REF -o FILE`: one photo; REF is `<session>/<uuid>/<index>` with
  `--pin PIN`, or `media:<sha256>`.
- `scrollback send SESSION TEXT [--image PATH ...]` (or `--chat-key KEY TEXT`): send a
  message, uploading its images first.
- `scrollback tail SESSION`: the last entries, then new entries and accepted messages
  live, until Ctrl-C.
- `scrollback gc [--state DIR] [--grace SECONDS]`: collect unreferenced blobs.
- `scrollback export SESSION --html DIR`: a static HTML page, images as lazy files.

The client commands take `--history-addr` / `--media-addr` (environment
SCROLLBACK_HISTORY_ADDR / SCROLLBACK_MEDIA_ADDR, defaults 127.0.0.1:50051 and
127.0.0.1:50052), print tables by default and JSON with `--json`. Flags
override the environment (CONTRACT section 6).

Exit codes, for scripts:
- 0: success (also Ctrl-C of `tail` and `up`);
- 1: failure: an RPC error (other than NOT_FOUND), an unreachable service, an I/O error;
- 2: bad usage or configuration (argparse errors, a malformed REF, a missing file);
- 3: not found (the service answered NOT_FOUND).
Errors are one line on stderr, e.g. `scrollback: NOT_FOUND: session not found`; never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

_ENV_FLAGS = {
    "transcripts": "SCROLLBACK_TRANSCRIPTS",
    "state": "SCROLLBACK_STATE",
    "history_addr": "SCROLLBACK_HISTORY_ADDR",
    "media_addr": "SCROLLBACK_MEDIA_ADDR",
    "auth_tokens": "SCROLLBACK_AUTH_TOKENS",
    "database_url": "SCROLLBACK_DATABASE_URL",
}


def _apply_flags_to_env(args: argparse.Namespace) -> None:
    """Flags of the same names override the environment the configs read."""
    for attribute, variable in _ENV_FLAGS.items():
        value = getattr(args, attribute, None)
        if value:
            os.environ[variable] = str(value)


async def _run_up(insecure: bool, with_gateway: bool = False) -> int:
    from history_service.config import HistoryConfig
    from history_service.server import start_history_server
    from media_service.config import MediaConfig
    from media_service.server import start_media_server
    from scrollback.server.grpc_support import wait_for_shutdown_signal

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
    gateway = None
    if with_gateway:
        from gateway.config import GatewayConfig
        from gateway.server import start_gateway

        try:
            gateway_config = GatewayConfig.from_env().with_overrides(
                history_addr=f"127.0.0.1:{history.port}",
                media_addr=f"127.0.0.1:{media.port}",
                insecure=insecure,
            )
            gateway = await start_gateway(gateway_config)
        except BaseException:
            await asyncio.gather(history.stop(), media.stop())
            raise
    log = logging.getLogger("scrollback")
    log.info("history service listening on port %d", history.port)
    log.info("media service listening on port %d", media.port)
    served = f"history on port {history.port}, media on port {media.port}"
    if gateway is not None:
        served += f", gateway and viewer on port {gateway.port}"
    print(f"scrollback up: {served}; Ctrl-C stops", flush=True)
    try:
        await wait_for_shutdown_signal()
    finally:
        stops = [history.stop(), media.stop()]
        if gateway is not None:
            stops.append(gateway.stop())
        await asyncio.gather(*stops)
    return EXIT_OK


def _cmd_up(args: argparse.Namespace) -> int:
    _apply_flags_to_env(args)
    if args.gateway_addr:
        os.environ["SCROLLBACK_GATEWAY_ADDR"] = args.gateway_addr
    from gateway.config import ConfigError

    try:
        return asyncio.run(_run_up(args.insecure, args.gateway))
    except ConfigError as error:
        print(f"scrollback: {error}", file=sys.stderr)
        return EXIT_USAGE


def _cmd_gateway(args: argparse.Namespace) -> int:
    from gateway.__main__ import config_from_args
    from gateway.config import ConfigError
    from gateway.server import serve

    try:
        config = config_from_args(args)
    except ConfigError as error:
        print(f"scrollback: {error}", file=sys.stderr)
        return EXIT_USAGE
    asyncio.run(serve(config))
    return EXIT_OK


def _cmd_bench(args: argparse.Namespace) -> int:
    from scrollback_app.bench.command import run

    return run(args)


def _cmd_loadtest(args: argparse.Namespace) -> int:
    from scrollback_app.loadtest import run_load

    report = run_load(args.seconds, args.clients)
    print(report.render())
    return EXIT_FAILURE if report.total_errors else EXIT_OK


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
        "--auth-tokens", help="bearer token file, YAML or JSON (SCROLLBACK_AUTH_TOKENS)"
    )
    up.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without auth"
    )
    up.add_argument("--database-url", help="postgresql:// state database (SCROLLBACK_DATABASE_URL)")
    up.add_argument(
        "--gateway", action="store_true", help="also serve the HTTP gateway and the viewer"
    )
    up.add_argument("--gateway-addr", help="gateway address (SCROLLBACK_GATEWAY_ADDR)")
    up.set_defaults(handler=_cmd_up)

    gateway = commands.add_parser(
        "gateway", help="the HTTP gateway and viewer, a client of running services"
    )
    from gateway.__main__ import add_arguments as add_gateway_arguments

    add_gateway_arguments(gateway)
    gateway.set_defaults(handler=_cmd_gateway)

    bench = commands.add_parser("bench", help="run the benchmarks against their baselines")
    from scrollback_app.bench.command import add_arguments as add_bench_arguments

    add_bench_arguments(bench)
    bench.set_defaults(handler=_cmd_bench)

    loadtest = commands.add_parser(
        "loadtest", help="a bounded load test of both services on loopback"
    )
    loadtest.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    loadtest.add_argument("--clients", type=int, default=8, help="concurrent clients")
    loadtest.set_defaults(handler=_cmd_loadtest)
    _add_client_commands(commands)
    return parser


def _add_client_commands(commands: Any) -> None:
    from scrollback_app import cli_client as cc

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--history-addr",
        default=os.environ.get("SCROLLBACK_HISTORY_ADDR") or "127.0.0.1:50051",
        help="history service HOST:PORT (SCROLLBACK_HISTORY_ADDR, default 127.0.0.1:50051)",
    )
    common.add_argument(
        "--media-addr",
        default=os.environ.get("SCROLLBACK_MEDIA_ADDR") or "127.0.0.1:50052",
        help="media service HOST:PORT (SCROLLBACK_MEDIA_ADDR, default 127.0.0.1:50052)",
    )
    common.add_argument("--timeout", type=float, help="per-call deadline in seconds")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")

    sessions = commands.add_parser("sessions", parents=[common], help="list sessions")
    sessions.add_argument("--project", help="only this project directory")
    sessions.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")
    sessions.set_defaults(handler=cc.cmd_sessions)

    window = commands.add_parser("window", parents=[common], help="print one page of a session")
    window.add_argument("session")
    direction = window.add_mutually_exclusive_group()
    direction.add_argument("--older", metavar="TOKEN", help="the next page token printed before")
    direction.add_argument(
        "--oldest-first", action="store_true", help="start from the beginning of the session"
    )
    window.add_argument("--page-size", type=int, help="entries per page (at most 200)")
    window.set_defaults(handler=cc.cmd_window)

    media = commands.add_parser("media", parents=[common], help="fetch one photo")
    media.add_argument("ref", help="<session>/<uuid>/<index> (with --pin) or media:<sha256>")
    media.add_argument("--pin", help="the pin of a transcript image reference")
    media.add_argument("-o", "--output", required=True, help="output file ('-': stdout)")
    media.set_defaults(handler=cc.cmd_media)

    send = commands.add_parser("send", parents=[common], help="send a message")
    send.add_argument("session", nargs="?", help="the session id (or use --chat-key)")
    send.add_argument("text")
    send.add_argument("--chat-key", help="a client-chosen key for a chat with no session yet")
    send.add_argument(
        "--image", action="append", metavar="PATH", help="attach an image (repeatable)"
    )
    send.set_defaults(handler=cc.cmd_send)

    tail = commands.add_parser("tail", parents=[common], help="follow a session live")
    tail.add_argument("session")
    tail.add_argument("--last", type=int, default=10, help="entries to print first")
    tail.set_defaults(handler=cc.cmd_tail)

    gc = commands.add_parser("gc", help="collect unreferenced blobs in the local state dir")
    gc.add_argument("--state", help="state directory (SCROLLBACK_STATE, default ./.scrollback)")
    gc.add_argument(
        "--grace", type=float, default=3600.0, help="keep blobs younger than this (seconds)"
    )
    gc.add_argument("--json", action="store_true", help="print JSON for scripts")
    gc.set_defaults(handler=cc.cmd_gc)

    export = commands.add_parser("export", parents=[common], help="export a session as HTML")
    export.add_argument("session")
    export.add_argument("--html", required=True, metavar="DIR", help="output directory")
    export.set_defaults(handler=cc.cmd_export)


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
    except Exception as error:
        return _report(error)
    return code


def _report(error: Exception) -> int:
    """One line on stderr for a failed command; the exit code for it."""
    import grpc

    from client.errors import NotFound, ScrollbackError, from_rpc_error
    from scrollback_app.cli_client import UsageError

    if isinstance(error, grpc.RpcError):
        error = from_rpc_error(error)
    if isinstance(error, UsageError):
        print(f"scrollback: usage: {error}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(error, ScrollbackError):
        print(f"scrollback: {error.code_name}: {error.message}", file=sys.stderr)
        return EXIT_NOT_FOUND if isinstance(error, NotFound) else EXIT_FAILURE
    if isinstance(error, OSError):
        print(f"scrollback: error: {error.strerror or error}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"scrollback: error: {type(error).__name__}: {error}", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
