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
environment (docs/contract.md §6).

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
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrollback.server.service_config import DEFAULT_STATE_TEXT

if TYPE_CHECKING:
    from client.tls import TlsOptions
    from history_service.config import HistoryConfig
    from media_service.config import MediaConfig
    from scrollback.objects import Location

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
GRPC_VERBOSITY_ENV = "GRPC_VERBOSITY"


class _WorkerTree:
    """A service `up` runs as worker processes (scrollback.server.workers)."""

    def __init__(self, supervisor: Any) -> None:
        self.supervisor = supervisor

    @property
    def port(self) -> int:
        """The port its workers share."""
        return int(self.supervisor.port)

    async def stop(self) -> None:
        """Stop every worker."""
        await asyncio.to_thread(self.supervisor.stop)

    async def ended(self) -> str:
        """Return when the service has ended by itself (a worker's fatal status); why."""
        await asyncio.to_thread(self.supervisor.wait)
        return f"the {self.supervisor.name.replace('_', ' ')} stopped (see above)"


def _worker_argv(config: Any) -> list[str]:
    """The flags that give a worker `config` (the rest it reads from the same environment)."""
    from scrollback.objects import location_text

    argv = [
        "--transcripts",
        location_text(config.transcripts),
        "--state",
        str(config.state_dir),
        "--stall-timeout-seconds",
        str(config.stall_timeout_seconds),
    ]
    if config.codex_sessions is not None:
        argv += ["--codex-sessions", location_text(config.codex_sessions)]
    if config.insecure:
        argv.append("--insecure")
    if config.security.auth_tokens is not None:
        argv += ["--auth-tokens", str(config.security.auth_tokens)]
    return argv


async def _start_workers(name: str, config: Any, forkserver: Any) -> _WorkerTree:
    """Start `config.workers` workers of `python -m <name>` on the configuration's address.

    Each worker is configured by the flags `_worker_argv` gives and the
    environment `up` read, and forked from `forkserver` when there is one;
    raises ConfigError or ListenError.
    """
    from scrollback.server.listening import ListenError, listen_reason
    from scrollback.server.service_config import ConfigError
    from scrollback.server.workers import Supervisor

    config.validate()
    prefix = "SCROLLBACK_HISTORY" if name == "history_service" else "SCROLLBACK_MEDIA"
    supervisor = Supervisor(
        name,
        _worker_argv(config),
        address=config.addr,
        count=config.workers,
        metrics_addr=config.security.metrics_addr,
        metrics_env=f"{prefix}_METRICS_ADDR",
        forkserver=forkserver,
    )
    try:
        started = await asyncio.to_thread(supervisor.start)
    except OSError as error:
        raise ListenError(config.addr, listen_reason(error)) from None
    if not started:
        raise ConfigError(f"the {name.replace('_', ' ')} did not start (see above)")
    return _WorkerTree(supervisor)


def _transcripts_override(args: argparse.Namespace) -> Location | None:
    """`--transcripts`; with none set and none at the default, the bundled sample sessions."""
    from scrollback.samples import SAMPLES_ROOT
    from scrollback.server.service_config import (
        TRANSCRIPTS_ENV,
        location_setting,
        transcripts_from_env,
    )

    if args.transcripts is not None:
        return location_setting(args.transcripts)
    if os.environ.get(TRANSCRIPTS_ENV):
        return None  # chosen explicitly: checked as given
    looked_for = transcripts_from_env()
    if not isinstance(looked_for, Path) or looked_for.is_dir():
        return None
    print(
        f"scrollback up: no transcripts at {looked_for} (set {TRANSCRIPTS_ENV} or --transcripts); "
        "serving the bundled sample sessions",
        flush=True,
    )
    return Path(SAMPLES_ROOT)


def _codex_override(args: argparse.Namespace, *, samples: bool) -> Location | None:
    """`--codex-sessions`; with the sample sessions served and no Codex dir found, the sample
    rollout's (so the README's Codex lines run on a fresh machine too)."""
    from scrollback.samples import CODEX_SAMPLES
    from scrollback.server.service_config import codex_sessions_from_env, location_setting

    if args.codex_sessions is not None:
        return location_setting(args.codex_sessions)
    if not samples or codex_sessions_from_env() is not None:
        return None
    return Path(CODEX_SAMPLES)


def up_configs(args: argparse.Namespace) -> tuple[HistoryConfig, MediaConfig]:
    """The services' configurations of `scrollback up`: the environment, the flags winning.

    The same path from flags to a configuration as `python -m <service>`
    (`shared_overrides`, then `from_env`); the environment is only read.
    """
    from history_service.config import HistoryConfig
    from media_service.config import MediaConfig
    from scrollback.samples import SAMPLES_ROOT
    from scrollback.server.service_cli import shared_overrides

    transcripts = _transcripts_override(args)
    shared = {
        **shared_overrides(args),
        "transcripts": transcripts,
        "codex_sessions": _codex_override(args, samples=transcripts == Path(SAMPLES_ROOT)),
    }
    return (
        HistoryConfig.from_env(addr=args.history_addr, workers=args.workers, **shared),
        MediaConfig.from_env(addr=args.media_addr, workers=args.workers, **shared),
    )


async def _start_forkserver(names: list[str]) -> Any:
    """One fork server for the workers of the services `names`; None when there are none,
    or where this process cannot adopt the workers it forks (not Linux).

    The workers of both services are forked from it, so they share the pages of
    what they import (scrollback.server.forkserver) instead of each holding its own.
    """
    from scrollback.server.forkserver import ForkServer, become_subreaper

    if not names or not become_subreaper():
        return None
    forkserver = ForkServer(
        [module for name in names for module in (f"{name}.__main__", f"{name}.server")]
    )
    await asyncio.to_thread(forkserver.start)
    return forkserver


async def _run_up(args: argparse.Namespace) -> int:
    """Both services (and the gateway with --gateway), configured as `python -m <service>` is."""
    history_config, media_config = up_configs(args)
    forkserver = await _start_forkserver(
        [
            name
            for name, config in (
                ("history_service", history_config),
                ("media_service", media_config),
            )
            if config.workers > 1
        ]
    )
    try:
        return await _serve_up(args, history_config, media_config, forkserver)
    finally:
        if forkserver is not None:
            await asyncio.to_thread(forkserver.close)


async def _serve_up(
    args: argparse.Namespace,
    history_config: HistoryConfig,
    media_config: MediaConfig,
    forkserver: Any,
) -> int:
    """`up` once configured: start the services (and the gateway), wait for a stop."""
    from scrollback.server.listening import (
        ListenError,
        listen_failure,
        listening_at,
        listening_line,
        url_of,
        wait_for_shutdown_signal,
    )
    from scrollback.server.service_config import ConfigError

    history: Any
    media: Any
    try:
        if history_config.workers > 1:
            history = await _start_workers("history_service", history_config, forkserver)
        else:
            # Imported only here: a parent of workers serves nothing, and the server's
            # modules would count once more in the service's memory.
            from history_service.server import start_history_server

            history = await start_history_server(history_config)
    except ListenError as error:
        raise ConfigError(
            listen_failure(error, "--history-addr", "SCROLLBACK_HISTORY_ADDR")
        ) from None
    try:
        if media_config.workers > 1:
            media = await _start_workers("media_service", media_config, forkserver)
        else:
            from media_service.server import start_media_server

            media = await start_media_server(media_config)
    except BaseException as error:
        await history.stop()
        if isinstance(error, ListenError):
            raise ConfigError(
                listen_failure(error, "--media-addr", "SCROLLBACK_MEDIA_ADDR")
            ) from None
        raise
    gateway = None
    if args.gateway:
        from gateway.config import GatewayConfig
        from gateway.server import start_gateway

        try:
            gateway_config = GatewayConfig.from_env(
                addr=args.gateway_addr,
                history_addr=f"127.0.0.1:{history.port}",
                media_addr=f"127.0.0.1:{media.port}",
                auth_tokens=history_config.security.auth_tokens,
                insecure=args.insecure or None,
                tls=_gateway_tls(history_config),
            )
            gateway = await start_gateway(gateway_config)
        except BaseException:
            await asyncio.gather(history.stop(), media.stop())
            raise
    log = logging.getLogger("scrollback")
    from scrollback.objects import location_text

    log.info("serving transcripts from %s", location_text(history_config.transcripts))
    log.info("state dir %s", history_config.state_dir)
    log.info("%s", listening_line("history service", history_config.addr, history.port))
    log.info("%s", listening_line("media service", media_config.addr, media.port))
    served = (
        f"history on {listening_at(history_config.addr, history.port)}, "
        f"media on {listening_at(media_config.addr, media.port)}"
    )
    if gateway is not None:
        served += f", the viewer at {url_of(gateway_config.addr, gateway.port)}"
    print(f"scrollback up: {served}; Ctrl-C stops", flush=True)
    # A service of workers ends by itself only on a fatal worker status: then `up` ends too.
    waits: list[asyncio.Future[str | None]] = [asyncio.ensure_future(wait_for_shutdown_signal())]
    waits += [
        asyncio.ensure_future(tree.ended())
        for tree in (history, media)
        if isinstance(tree, _WorkerTree)
    ]
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for finished in done:
            reason = finished.result()
            if reason:
                print(f"scrollback up: {reason}", file=sys.stderr, flush=True)
                return EXIT_USAGE
    finally:
        for waiting in waits:
            waiting.cancel()
        stops = [history.stop(), media.stop()]
        if gateway is not None:
            stops.append(gateway.stop())
        await asyncio.gather(*stops)
    return EXIT_OK


def _gateway_tls(history_config: HistoryConfig) -> TlsOptions | None:
    """How `up`'s gateway speaks to the services it started: the client's SCROLLBACK_TLS_*
    settings; TLS (the system's roots unless SCROLLBACK_TLS_CA) when they serve TLS."""
    from client.tls import TLS_CLIENT_CERT_ENV, TLS_CLIENT_KEY_ENV, TlsOptions
    from scrollback.server.service_config import ConfigError

    security = history_config.security
    tls = TlsOptions.from_env()
    if security.tls_cert is None:
        return tls
    tls = tls or TlsOptions()
    if security.tls_client_ca is not None and tls.cert is None:
        raise ConfigError(
            "the services ask for client certificates (SCROLLBACK_TLS_CLIENT_CA): give the "
            f"gateway one they trust with {TLS_CLIENT_CERT_ENV} / {TLS_CLIENT_KEY_ENV}"
        )
    return tls


# Where `up --container` looks for a mounted token file (docker run -v FILE:/run/secrets/...).
CONTAINER_TOKENS = Path("/run/secrets/scrollback-tokens")


def _container_defaults(args: argparse.Namespace) -> None:
    """`up --container`, the image's default command: reachable through published ports.

    The services listen on 0.0.0.0 unless an address is set; with a token file
    (--auth-tokens, SCROLLBACK_AUTH_TOKENS, or one mounted at CONTAINER_TOKENS)
    they require it, and without one they serve without auth (--insecure), which
    the log says with how to publish the ports on the host's loopback only.
    """
    log = logging.getLogger("scrollback")
    if args.history_addr is None and not os.environ.get("SCROLLBACK_HISTORY_ADDR"):
        args.history_addr = "0.0.0.0:50051"
    if args.media_addr is None and not os.environ.get("SCROLLBACK_MEDIA_ADDR"):
        args.media_addr = "0.0.0.0:50052"
    tokens_given = args.auth_tokens is not None or bool(os.environ.get("SCROLLBACK_AUTH_TOKENS"))
    if not tokens_given and CONTAINER_TOKENS.is_file():
        args.auth_tokens = CONTAINER_TOKENS
        tokens_given = True
    if tokens_given:
        log.info("container: callers need a bearer token of the token file")
        return
    args.insecure = True
    log.warning(
        "container: no token file (mount one at %s or set SCROLLBACK_AUTH_TOKENS): serving "
        "without auth (--insecure) to whoever reaches the published ports; publish them on the "
        "host's loopback only: docker run -p 127.0.0.1:50051:50051 -p 127.0.0.1:50052:50052 ...",
        CONTAINER_TOKENS,
    )


def _cmd_up(args: argparse.Namespace) -> int:
    from scrollback.server.listening import BindRefusedError
    from scrollback.server.service_config import ConfigError

    if args.container:
        _container_defaults(args)
    try:
        return asyncio.run(_run_up(args))
    except (ConfigError, BindRefusedError) as error:
        print(f"scrollback up: {error}", file=sys.stderr)
        return EXIT_USAGE


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

    up = commands.add_parser("up", help="run both services in the foreground")
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
    _add_client_commands(commands)
    for command in commands.choices.values():
        command.set_defaults(command_parser=command)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed arguments; an unknown flag is refused by its command's parser, which shows
    that command's usage and the closest flag it has (argparse would show the top level's)."""
    import difflib

    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command: argparse.ArgumentParser = args.command_parser
        flags = [flag for action in command._actions for flag in action.option_strings]
        hint = ""
        typo = next((word for word in unknown if word.startswith("--")), None)
        if typo is not None:
            close = difflib.get_close_matches(typo.split("=", 1)[0], flags, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


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
    common.add_argument(
        "--timeout",
        type=float,
        help="per-call deadline in seconds (default: the client library's per-call deadlines)",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    common.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help="speak TLS, trusting the system's roots (SCROLLBACK_TLS=1; default plaintext)",
    )
    common.add_argument(
        "--tls-ca", metavar="PEM", help="trust this CA for TLS (SCROLLBACK_TLS_CA; implies --tls)"
    )
    common.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="client certificate for mutual TLS, with --tls-key (SCROLLBACK_TLS_CLIENT_CERT)",
    )
    common.add_argument(
        "--tls-key", metavar="PEM", help="the client certificate's key (SCROLLBACK_TLS_CLIENT_KEY)"
    )
    common.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name the server certificate must carry, if not the host "
        "(SCROLLBACK_TLS_SERVER_NAME)",
    )

    sessions = commands.add_parser("sessions", parents=[common], help="list sessions")
    sessions.add_argument("--project", help="only this project directory")
    sessions.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")
    sessions.set_defaults(handler=cc.cmd_sessions)

    for name in ("session", "info"):
        session = commands.add_parser(
            name, parents=[common], help="one session's totals: entries, tokens, estimated cost"
        )
        session.add_argument("session")
        session.set_defaults(handler=cc.cmd_session)

    window = commands.add_parser("window", parents=[common], help="print one page of a session")
    window.add_argument("session")
    direction = window.add_mutually_exclusive_group()
    direction.add_argument(
        "--older", metavar="TOKEN", help="the next (older) page: the token printed before"
    )
    direction.add_argument(
        "--newer",
        metavar="TOKEN",
        help="the next (newer) page of an --oldest-first listing: the token printed before",
    )
    direction.add_argument(
        "--oldest-first", action="store_true", help="start from the beginning of the session"
    )
    window.add_argument("--page-size", type=int, help="entries per page (default and at most 200)")
    window.set_defaults(handler=cc.cmd_window)

    search = commands.add_parser(
        "search",
        parents=[common],
        help='search every session: words, "phrases", prefix*',
    )
    search.add_argument("query", help='words (all must match), "a phrase", or a prefix*')
    search.add_argument("--project", help="only this project directory")
    search.add_argument("--session", help="only this session")
    search.add_argument(
        "--type", action="append", help="only entries of this type (repeatable: user, ...)"
    )
    search.add_argument("--role", action="append", help="only this message role (repeatable)")
    search.add_argument("--since", metavar="ISO", help="only entries at or after this time")
    search.add_argument("--until", metavar="ISO", help="only entries before this time")
    search.add_argument(
        "--photos", choices=["with", "without"], help="only entries with (or without) photos"
    )
    search.add_argument(
        "--newest",
        action="store_true",
        help="newest first (default: most relevant first)",
    )
    search.add_argument("--limit", type=int, default=20, help="hits per page (at most 100)")
    search.add_argument("--page-token", metavar="TOKEN", help="the next page: the token printed")
    search.set_defaults(handler=cc.cmd_search)

    media = commands.add_parser("media", parents=[common], help="fetch one photo")
    media.add_argument("ref", help="<session>/<uuid>/<index> (with --pin) or media:<sha256>")
    media.add_argument("--pin", help="the pin of a transcript image reference")
    media.add_argument("-o", "--output", required=True, help="output file ('-': stdout)")
    media.add_argument(
        "--size",
        type=int,
        choices=(96, 320, 960),
        help="a WebP thumbnail of at most SIZE pixels on its longest side, not the original",
    )
    media.set_defaults(handler=cc.cmd_media)

    send = commands.add_parser("send", parents=[common], help="send a message")
    send.add_argument(
        "session", nargs="?", help="an existing session's id (for a new chat: --chat-key)"
    )
    send.add_argument("text", help="the message text")
    send.add_argument("--chat-key", help="a client-chosen key for a new chat with no session yet")
    send.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="attach an image: PNG, JPEG, GIF, WebP, AVIF or HEIC, by its bytes (repeatable)",
    )
    send.add_argument(
        "--file",
        action="append",
        metavar="PATH",
        help="attach any file as a plain attachment, not shown inline (repeatable)",
    )
    send.set_defaults(handler=cc.cmd_send)

    tail = commands.add_parser("tail", parents=[common], help="follow a session live")
    tail.add_argument("session")
    tail.add_argument("--last", type=int, default=10, help="entries to print first (default 10)")
    tail.set_defaults(handler=cc.cmd_tail)

    gc = commands.add_parser("gc", help="collect unreferenced blobs in the local state dir")
    gc.add_argument(
        "--state", help=f"state directory (SCROLLBACK_STATE, default {DEFAULT_STATE_TEXT})"
    )
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="keep blobs younger than this, in seconds (default 3600)",
    )
    gc.add_argument("--json", action="store_true", help="print JSON for scripts")
    gc.set_defaults(handler=cc.cmd_gc)

    export = commands.add_parser("export", parents=[common], help="export a session as HTML")
    export.add_argument("session")
    export.add_argument("--html", required=True, metavar="DIR", help="output directory")
    export.set_defaults(handler=cc.cmd_export)

    from scrollback_app import cli_rescue

    cli_rescue.add_commands(commands, common)


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
        code: int = args.handler(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except Exception as error:
        return _report(error, args)
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
