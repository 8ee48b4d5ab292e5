"""`scrollback up`: both services (and the gateway) in the foreground, until Ctrl-C.

Their configurations come from the environment and the flags through the same path as
`python -m <service>`; with no transcripts configured and none at the default, the bundled
samples. Each service runs as worker processes forked from one process that imported both
(scrollback.server.forkserver); `--container` is the image's default command.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.tls import TlsOptions
    from history_service.config import HistoryConfig
    from media_service.config import MediaConfig
    from scrollback.objects import Location

# The exit statuses of `scrollback` (scrollback_app.cli) that `up` returns.
EXIT_OK = 0
EXIT_USAGE = 2


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
    if config.opencode_db is not None:
        argv += ["--opencode-db", str(config.opencode_db)]
    if config.gemini_home is not None:
        argv += ["--gemini-home", str(config.gemini_home)]
    if config.insecure:
        argv.append("--insecure")
    if config.security.auth_tokens is not None:
        argv += ["--auth-tokens", str(config.security.auth_tokens)]
    return argv


def served_sources(config: HistoryConfig) -> list[str]:
    """The start-up lines naming each source served and where it is read from."""
    from scrollback.objects import location_text

    lines = [f"source claude-code: {location_text(config.transcripts)}"]
    if config.codex_sessions is not None:
        lines.append(f"source codex: {location_text(config.codex_sessions)}")
    if config.opencode_db is not None:
        lines.append(f"source opencode: {config.opencode_db} (read-only)")
    if config.gemini_home is not None:
        lines.append(f"source gemini: {config.gemini_home}")
    return lines


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


# Imported by a worker's start (its transcripts source and line index store), not by
# the services' modules.
_WORKER_START_MODULES = ("scrollback.bucket", "scrollback.state.line_index_sqlite")


async def _start_forkserver(names: list[str]) -> Any:
    """One fork server for the workers of the services `names`; None when there are none,
    or where this process cannot adopt the workers it forks (not Linux).

    The workers of both services are forked from it, so they share the pages of
    what they import (scrollback.server.forkserver) instead of each holding its own.
    """
    from scrollback.server.forkserver import ForkServer, become_subreaper

    if not names or not become_subreaper():
        return None
    # Beside the services' modules, those every worker imports as it starts serving.
    forkserver = ForkServer(
        [module for name in names for module in (f"{name}.__main__", f"{name}.server")]
        + list(_WORKER_START_MODULES)
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
    for line in served_sources(history_config):
        log.info("%s", line)
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
