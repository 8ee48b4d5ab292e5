"""The `scrollback` command: one entry point for running and operating the pair.

- `scrollback up`: both services in the foreground on embedded defaults
  (SQLite state and local files), until Ctrl-C or SIGTERM. With no
  transcripts root configured and none at ~/.claude/projects, it says so and
  serves the bundled sample sessions (scrollback.samples).
- `scrollback up --gateway`: the same, plus the HTTP gateway and viewer (SCROLLBACK_GATEWAY_ADDR).
- `scrollback up --container`: the container image's default command: listening on 0.0.0.0,
  with auth when a token file is mounted, else without (--insecure), said in the log.
- `scrollback up --workers N`: each service from N worker processes on its port
  (SCROLLBACK_HISTORY_WORKERS / SCROLLBACK_MEDIA_WORKERS; default the number of cores),
  all forked from one process that imported both services (scrollback.server.forkserver).
- `scrollback gateway`: the HTTP gateway alone, a client of running services.
- `scrollback bench`: the benchmarks, each figure beside its baseline.
- `scrollback loadtest [--seconds S] [--clients N]`: a bounded load test on loopback.
- `scrollback sessions`: the sessions under the root, newest first, with a usage column.
- `scrollback session SESSION` (or `info`): one session's entries, tokens, estimated cost.
- `scrollback window SESSION [--older TOKEN | --oldest-first] [--page-size N]`: one page.
- `scrollback media REF -o FILE`: one photo; REF is `<session>/<uuid>/<index>` with
  `--pin PIN`, or `media:<sha256>`; `--size 96|320|960` for a WebP thumbnail.
- `scrollback send SESSION TEXT [--image PATH ...] [--file PATH ...]` (or `--chat-key KEY
  TEXT`): send a message, uploading its images (checked by their bytes) and files first;
  prints each attachment's `media:<sha256>`.
- `scrollback tail SESSION`: the last entries, then new entries and accepted messages
  live, until Ctrl-C.
- `scrollback gc [--state DIR] [--grace SECONDS]`: collect unreferenced blobs.
- `scrollback export SESSION --html DIR`: a static HTML page drawn by the viewer's renderer, images as lazy files.
- `scrollback slim SESSION [-o FILE | --install] [--fork]`: a copy with images cut, to
  rescue a session that images have broken; `scrollback images SESSION [--at PATH]`:
  its images with their API positions and problems (scrollback_app/cli_rescue.py).

The client commands take `--history-addr` / `--media-addr` (environment
SCROLLBACK_HISTORY_ADDR / SCROLLBACK_MEDIA_ADDR, defaults 127.0.0.1:50051 and
127.0.0.1:50052) and `--tls`, `--tls-ca`, `--tls-cert`, `--tls-key`,
`--tls-server-name` (SCROLLBACK_TLS, SCROLLBACK_TLS_CA, ...: client.tls),
print tables by default and JSON with `--json`. Flags override the
environment (docs/contract.md §6). Each command's --help starts with what it
does and shows these connection flags in a group of their own; a mistyped
command gets the closest one. A command's SESSION may be the unique prefix
(8 characters or more) of a listed session's id: when the id as given is
NOT_FOUND, the command runs again with the whole id (more than one match is a
usage error naming them).

Exit codes, for scripts:
- 0: success (also Ctrl-C of `tail` and `up`);
- 1: failure: an RPC error (other than NOT_FOUND and INVALID_ARGUMENT), an unreachable
  service, an I/O error;
- 2: bad usage or configuration (argparse errors, a malformed REF or session id, a
  request the service refused as INVALID_ARGUMENT, a missing file,
  a configuration `up` or `gateway` cannot start on, an address it cannot listen on);
- 3: not found (the service answered NOT_FOUND).
Errors are one line on stderr, e.g. `scrollback: NOT_FOUND: session not found`; never a
traceback. gRPC's C-core log lines (GRPC_VERBOSITY) show only with `-v` or the variable set.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from scrollback_app.cli_up import CONTAINER_TOKENS, _cmd_up

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
GRPC_VERBOSITY_ENV = "GRPC_VERBOSITY"


def _cmd_gateway(args: argparse.Namespace) -> int:
    """The gateway, run as `python -m gateway` runs it (its errors, exit codes and messages)."""
    from gateway.__main__ import config_from_args
    from scrollback.server.service_cli import run_service

    return run_service(
        "gateway", lambda: config_from_args(args), addr_env="SCROLLBACK_GATEWAY_ADDR"
    )


def _cmd_bench(args: argparse.Namespace) -> int:
    from scrollback_app.bench.command import run

    return run(args)


def _cmd_loadtest(args: argparse.Namespace) -> int:
    from scrollback_app.loadtest import run_load

    report = run_load(args.seconds, args.clients)
    print(report.render())
    return EXIT_FAILURE if report.total_errors else EXIT_OK


def build_parser(only_up: bool = False) -> argparse.ArgumentParser:
    """The argument parser of the `scrollback` command (with `only_up`, of `up` alone).

    The other commands' flags import their modules (the client and grpc, the
    gateway, the bench), which a long-running `up` would otherwise keep in its
    memory for nothing.
    """
    from gateway.defaults import DEFAULT_ADDR as DEFAULT_GATEWAY_ADDR
    from history_service.config import DEFAULT_ADDR as DEFAULT_HISTORY_ADDR
    from media_service.config import DEFAULT_ADDR as DEFAULT_MEDIA_ADDR
    from scrollback.server.service_cli import add_shared_flags, add_version, plain

    parser = argparse.ArgumentParser(prog="scrollback", description=plain(__doc__.splitlines()[0]))
    add_version(parser, "scrollback")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser(
        "up",
        help="run both services in the foreground",
        description="Run both services in the foreground, until Ctrl-C.",
        usage="%(prog)s [options]",
    )
    add_shared_flags(
        up,
        services="SCROLLBACK_HISTORY_STALL_TIMEOUT_SECONDS / SCROLLBACK_MEDIA_STALL_TIMEOUT_SECONDS",
        transcripts_help="the transcripts root (the bundled samples when none is set and the "
        "default does not exist)",
    )
    up.add_argument(
        "--history-addr",
        help=f"history service address (SCROLLBACK_HISTORY_ADDR, default {DEFAULT_HISTORY_ADDR})",
    )
    up.add_argument(
        "--media-addr",
        help=f"media service address (SCROLLBACK_MEDIA_ADDR, default {DEFAULT_MEDIA_ADDR})",
    )
    up.add_argument(
        "--gateway", action="store_true", help="also serve the HTTP gateway and the viewer"
    )
    up.add_argument(
        "--gateway-addr",
        help=f"gateway address (SCROLLBACK_GATEWAY_ADDR, default {DEFAULT_GATEWAY_ADDR})",
    )
    up.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes per service (SCROLLBACK_HISTORY_WORKERS / "
        "SCROLLBACK_MEDIA_WORKERS, default: the number of cores)",
    )
    up.add_argument(
        "--container",
        action="store_true",
        help="the container image's default: listen on 0.0.0.0 unless an address is set; "
        f"auth when a token file is given or mounted at {CONTAINER_TOKENS}, else --insecure "
        "(said in the log)",
    )
    up.set_defaults(handler=_cmd_up)
    if only_up:
        up.set_defaults(command_parser=up)
        return parser

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
    loadtest.add_argument(
        "--seconds", type=float, default=60.0, help="how long to run (default 60)"
    )
    loadtest.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    loadtest.set_defaults(handler=_cmd_loadtest)
    from scrollback_app.cli_parsers import add_client_commands

    add_client_commands(commands)
    for action in commands._choices_actions:
        # Each command's --help starts with what it does: its line in the list of commands.
        chosen = commands.choices[action.dest]
        if chosen.description is None and action.help:
            chosen.description = action.help[0].upper() + action.help[1:] + "."
        chosen.usage = _short_usage(chosen)
    for command in commands.choices.values():
        command.set_defaults(command_parser=command)
    return parser


def _short_usage(command: argparse.ArgumentParser) -> str:
    """`scrollback COMMAND ARGS [options]`: the arguments a command needs, then its
    description, rather than every flag (the connection flags among them) before it."""
    words = []
    for action in command._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        name = (action.metavar if isinstance(action.metavar, str) else action.dest).upper()
        words.append(f"[{name}]" if action.nargs == "?" else name)
    return " ".join(["%(prog)s", *words, "[options]"])


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed arguments; an unknown flag is refused by its command's parser, which shows
    that command's usage and the closest flag it has (argparse would show the top level's)."""
    given = list(sys.argv[1:] if argv is None else argv)
    word = next((arg for arg in given if not arg.startswith("-")), None)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if word is not None and word not in commands.choices:
        import difflib

        close = difflib.get_close_matches(word, list(commands.choices), n=1, cutoff=0.6)
        hint = f"; did you mean `scrollback {close[0]}`?" if close else ""
        parser.error(f"unknown command {word!r}{hint} (`scrollback --help` lists them)")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command: argparse.ArgumentParser = args.command_parser
        flags = [flag for action in command._actions for flag in action.option_strings]
        hint = ""
        typo = next((word for word in unknown if word.startswith("--")), None)
        if typo is not None:
            import difflib

            close = difflib.get_close_matches(typo.split("=", 1)[0], flags, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def _quiet_grpc_core(argv: Sequence[str]) -> None:
    """Keep gRPC's C-core log lines (a failed handshake, a server's GOAWAY) off stderr.

    The command's own error line says what happened; `-v` (before the command) or
    GRPC_VERBOSITY set by the user shows them. gRPC reads the variable when it is
    first imported, so this runs before anything imports grpc, and does nothing in a
    process that imported it already (main called as a function).
    """
    if "grpc" in sys.modules:
        return
    for token in argv:
        if token in ("-v", "--verbose"):
            return
        if not token.startswith("-"):
            break  # the command: the flags after it are its own
    os.environ.setdefault(GRPC_VERBOSITY_ENV, "NONE")


def _runs_up(argv: Sequence[str]) -> bool:
    """True when the command is `up` with no help asked before it (the top level's lists all)."""
    for token in argv:
        if token not in ("-v", "--verbose"):
            return token == "up"
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    given = sys.argv[1:] if argv is None else argv
    _quiet_grpc_core(given)
    parser = build_parser(only_up=_runs_up(given))
    args = _parse(parser, argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = _run(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except Exception as error:
        return _report(error, args)
    return code


def _run(args: argparse.Namespace) -> int:
    """The command's handler; once more with the whole session id when the one given was
    NOT_FOUND and is the unique prefix (8 characters or more) of one listed."""
    try:
        code: int = args.handler(args)
    except Exception as error:
        # Imported only on failure: `up`, a long-lived parent of workers, never speaks
        # gRPC itself, and grpc and protobuf would stay in its memory.
        import grpc

        from client.errors import NotFound, from_rpc_error

        if not isinstance(error, NotFound | grpc.RpcError):
            raise
        failure = from_rpc_error(error) if isinstance(error, grpc.RpcError) else error
        if not isinstance(failure, NotFound):
            raise
        from scrollback_app.cli_client import whole_session_id

        whole = whole_session_id(args)
        if whole is None:
            raise failure from None
        args.session = whole
        code = args.handler(args)
    return code


def _quiet_broken_pipe() -> int:
    """The reader went away (`| head`): stop quietly, as a pipeline expects."""
    # Python would flush stdout again at exit and complain; point it at /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


_SERVICES = (
    ("history", "history_addr", "--history-addr", "SCROLLBACK_HISTORY_ADDR"),
    ("media", "media_addr", "--media-addr", "SCROLLBACK_MEDIA_ADDR"),
)


def _unavailable_text(addr: str, details: str, args: argparse.Namespace) -> str:
    """Which service did not answer, where, and how to start it or point elsewhere; or, when
    it answered but TLS failed, why (client.tls.explain_unavailable probes it when gRPC's
    details do not say)."""
    from client.tls import explain_unavailable
    from scrollback_app.cli_client import tls_options

    failure = explain_unavailable(details, addr, tls_options(args))
    for name, attribute, flag, variable in _SERVICES:
        if addr and addr == getattr(args, attribute, None):
            if failure:
                return f"the {name} service at {addr}: {failure}"
            return (
                f"no {name} service answers at {addr}; start the pair with `scrollback up`, "
                f"or point {flag} (or {variable}) at a running one"
            )
    if failure:
        return f"the service at {addr or 'the configured address'}: {failure}"
    return (
        f"no service answers at {addr or 'the configured address'}; start the pair with "
        "`scrollback up`, or point --history-addr / --media-addr at running services"
    )


def _report(error: Exception, args: argparse.Namespace | None = None) -> int:
    """One line on stderr for a failed command; the exit code for it."""
    import grpc

    from client.errors import (
        InvalidArgument,
        NotFound,
        PinMismatch,
        ScrollbackError,
        Unavailable,
        from_rpc_error,
    )
    from client.tls import TlsConfigError
    from scrollback.server.listening import BindRefusedError, ListenError
    from scrollback.server.service_config import ConfigError
    from scrollback_app.cli_client import UsageError

    if isinstance(error, grpc.RpcError):
        error = from_rpc_error(error)
    if isinstance(error, UsageError | TlsConfigError):
        print(f"scrollback: usage: {error}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(error, Unavailable) and args is not None:
        print(
            f"scrollback: UNAVAILABLE: {_unavailable_text(error.addr, error.message, args)}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if isinstance(error, PinMismatch):
        # The pin is the user's input: a typo is likelier than a rewritten transcript.
        print(
            f"scrollback: {error.code_name}: the pin does not match the photo the reference "
            "names; copy REF and --pin from `scrollback window SESSION --json`",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if isinstance(error, ScrollbackError):
        print(f"scrollback: {error.code_name}: {error.message}", file=sys.stderr)
        if isinstance(error, InvalidArgument):
            return EXIT_USAGE  # the arguments as given can never succeed
        return EXIT_NOT_FOUND if isinstance(error, NotFound) else EXIT_FAILURE
    if isinstance(error, OSError):
        # The user's own file names the failure (not a server's path: servers never send one).
        where = f": {error.filename}" if error.filename else ""
        print(f"scrollback: error: {error.strerror or error}{where}", file=sys.stderr)
        return EXIT_FAILURE
    if isinstance(error, ListenError | BindRefusedError | ConfigError):
        print(f"scrollback: {error}", file=sys.stderr)
        return EXIT_USAGE
    # No class name: the words are the user's; -v logs the traceback.
    logging.getLogger("scrollback").debug("failed", exc_info=error)
    print(f"scrollback: error: {error or 'an unexpected failure (-v shows it)'}", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
