"""The command line every server shares: `python -m history_service` / `media_service`, `scrollback up`.

`add_shared_flags` declares the flags of the settings every server reads
alike (`--transcripts`, `--state`, `--insecure`, `--auth-tokens`,
`--database-url`, `--stall-timeout-seconds`); `service_parser` adds `--addr`,
`--workers` and `--version`. Each help text names the flag's environment variable and its
default: flags and variables are named alike (`--<field>` and
`SCROLLBACK_[<SERVICE>_]<FIELD>`, scrollback.server.service_config).
`shared_overrides` turns the parsed flags into the keyword overrides of the
configs' `from_env`, the one path from flags to a configuration for
`python -m <service>` and `scrollback up` alike. `run_service` sets up logging,
builds the configuration and serves until SIGINT/SIGTERM: an unusable
configuration, a refused bind or an address it cannot listen on prints
`<name>: <error>` to stderr and returns exit status 2.
With more than one worker, `run_service` becomes the parent of that many
worker processes on one port (scrollback.server.workers).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from scrollback.server.auth import SecuritySettings
from scrollback.server.listening import (
    BindRefusedError,
    ListenError,
    check_bind_allowed,
    listen_failure,
    listen_reason,
)
from scrollback.server.service_config import (
    DEFAULT_CODEX_SESSIONS,
    DEFAULT_GEMINI_HOME,
    DEFAULT_OPENCODE_DB,
    DEFAULT_STALL_TIMEOUT_SECONDS,
    DEFAULT_STATE_TEXT,
    DEFAULT_TRANSCRIPTS,
    OPENCODE_DB_ENV,
    ConfigError,
    env_name,
    gemini_home_setting,
    location_setting,
)
from scrollback.server.worker_role import current_role
from scrollback.server.workers import FATAL_STATUS, can_share_port, supervise


@runtime_checkable
class ServedConfig(Protocol):
    """What `run_service` reads of a configuration that may have several workers."""

    @property
    def addr(self) -> str:
        """HOST:PORT to listen on."""
        ...

    @property
    def insecure(self) -> bool:
        """Allow a non-loopback address without auth."""
        ...

    @property
    def auth_configured(self) -> bool:
        """Auth is configured by other means than the security settings."""
        ...

    @property
    def workers(self) -> int:
        """Worker processes serving the port."""
        ...

    @property
    def security(self) -> SecuritySettings:
        """Auth, TLS, limits, metrics."""
        ...

    def validate(self) -> Any:
        """Raise the service's ConfigError when it cannot start."""
        ...


ConfigT = TypeVar("ConfigT")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
EXIT_CONFIG = FATAL_STATUS


def version() -> str:
    """The installed package's version."""
    # Imported here: it brings the email package, which `up`'s long-lived parent
    # would otherwise hold for nothing.
    from importlib import metadata

    try:
        return metadata.version("scrollback")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def plain(text: str | None) -> str | None:
    """Help text without the markdown backticks of the docstrings it comes from."""
    return text.replace("`", "") if text else text


class _VersionAction(argparse.Action):
    """argparse's `version` action, the version read only when asked for: reading it imports
    importlib.metadata and the email package, which a long-lived `up` would hold for nothing."""

    def __init__(self, option_strings: Sequence[str], dest: str, prog: str = "") -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )
        self.prog = prog

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"{self.prog} {version()}")
        parser.exit()


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """`--version` prints `<prog> <version>`."""
    parser.add_argument("--version", action=_VersionAction, prog=prog)


def add_shared_flags(
    parser: argparse.ArgumentParser,
    *,
    services: str,
    transcripts_help: str = "the transcripts root",
    state_help: str = "the state dir",
) -> None:
    """The flags of the settings every server reads alike; `services` names whose stall timeout."""
    parser.add_argument(
        "--transcripts",
        help=f"{transcripts_help} (SCROLLBACK_TRANSCRIPTS, default {DEFAULT_TRANSCRIPTS})",
    )
    parser.add_argument(
        "--codex-sessions",
        help=f"Codex CLI's sessions dir, its sibling archived_sessions read too "
        f"(SCROLLBACK_CODEX_SESSIONS, default {DEFAULT_CODEX_SESSIONS} when it exists)",
    )
    parser.add_argument(
        "--opencode-db",
        type=Path,
        help=f"opencode's SQLite database, read-only ({OPENCODE_DB_ENV}, default "
        f"{DEFAULT_OPENCODE_DB} when it exists)",
    )
    parser.add_argument(
        "--gemini-home",
        help=f"Gemini CLI's home, its sessions under tmp/<project>/chats "
        f"(SCROLLBACK_GEMINI_HOME, default {DEFAULT_GEMINI_HOME} when it exists)",
    )
    parser.add_argument(
        "--state", type=Path, help=f"{state_help} (SCROLLBACK_STATE, default {DEFAULT_STATE_TEXT})"
    )
    parser.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without auth"
    )
    parser.add_argument(
        "--auth-tokens",
        type=Path,
        help="bearer token file, YAML or JSON (SCROLLBACK_AUTH_TOKENS, default: no auth)",
    )
    parser.add_argument(
        "--database-url",
        help="postgresql:// URL of a shared database (SCROLLBACK_DATABASE_URL, default: SQLite "
        "in the state dir)",
    )
    parser.add_argument(
        "--stall-timeout-seconds",
        "--stall-timeout",
        dest="stall_timeout_seconds",
        type=float,
        metavar="SECONDS",
        help="end a stream whose client grants no flow-control window this long "
        f"({services}, default {DEFAULT_STALL_TIMEOUT_SECONDS:g})",
    )


def shared_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config overrides of the shared flags; None where a flag was not given."""
    return {
        "transcripts": location_setting(args.transcripts) if args.transcripts else None,
        "codex_sessions": location_setting(args.codex_sessions) if args.codex_sessions else None,
        "opencode_db": args.opencode_db.expanduser() if args.opencode_db else None,
        "gemini_home": gemini_home_setting(args.gemini_home) if args.gemini_home else None,
        "state_dir": args.state.expanduser() if args.state else None,
        "insecure": args.insecure or None,
        "auth_tokens": args.auth_tokens,
        "database_url": args.database_url or None,
        "stall_timeout_seconds": args.stall_timeout_seconds,
    }


def service_parser(
    prog: str,
    description: str | None,
    *,
    service: str,
    default_addr: str,
    transcripts_help: str = "the transcripts root",
    state_help: str = "the state dir",
) -> argparse.ArgumentParser:
    """The flags of a service; flags override the environment."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=plain(description),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(parser, prog)
    add_shared_flags(
        parser,
        services=env_name("stall_timeout_seconds", service),
        transcripts_help=transcripts_help,
        state_help=state_help,
    )
    parser.add_argument(
        "--addr",
        help=f"HOST:PORT to listen on ({env_name('addr', service)}, default {default_addr})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help=f"worker processes serving the one port ({env_name('workers', service)}, "
        "default: the number of cores)",
    )
    return parser


def run_service(
    name: str,
    build_config: Callable[[], ConfigT],
    *,
    addr_env: str,
    argv: Sequence[str] | None = None,
) -> int:
    """Log to stderr, build the configuration and serve it; the process's exit status.

    A configuration of several workers (and this process not one of them)
    starts them instead, on the flags of `argv`, and waits for them. The
    service's `<name>.server.serve` is imported only by a process that
    serves: the parent of workers never loads the server and its
    dependencies, whose memory would count once more in the service's total.
    """
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        config = build_config()
        if (
            isinstance(config, ServedConfig)
            and config.workers > 1
            and current_role() is None
            and can_share_port(config.addr)
        ):
            # Refuse once here, not once per worker.
            config.validate()
            check_bind_allowed(
                config.addr,
                auth_configured=config.auth_configured or config.security.auth_configured,
                insecure=config.insecure,
            )
            try:
                return supervise(
                    name,
                    sys.argv[1:] if argv is None else argv,
                    address=config.addr,
                    count=config.workers,
                    metrics_addr=config.security.metrics_addr,
                    metrics_env=addr_env.removesuffix("_ADDR") + "_METRICS_ADDR",
                )
            except OSError as error:
                raise ListenError(config.addr, listen_reason(error)) from None
        serve: Callable[[ConfigT], Coroutine[Any, Any, None]] = importlib.import_module(
            f"{name}.server"
        ).serve
        asyncio.run(serve(config))
    except ListenError as error:
        print(f"{name}: {listen_failure(error, '--addr', addr_env)}", file=sys.stderr)
        return EXIT_CONFIG
    except (ConfigError, BindRefusedError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return 0
