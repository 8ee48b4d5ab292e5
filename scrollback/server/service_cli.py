"""The command line both services share: `python -m history_service` / `python -m media_service`.

`service_parser` declares the flags (`--transcripts`, `--state`, `--addr`,
`--insecure`, `--auth-tokens`, `--stall-timeout`, `--database-url`, `--workers`,
`--version`), each
help text naming its environment variable and default; each service turns the
parsed flags into its configuration. `run_service` sets up logging, builds the
configuration and serves until SIGINT/SIGTERM: an unusable configuration, a
refused bind or an address it cannot listen on prints `<name>: <error>` to
stderr and returns exit status 2. With more than one worker, `run_service`
becomes the parent of that many worker processes on one port
(scrollback.server.workers).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from scrollback.server.auth import SecuritySettings
from scrollback.server.grpc_support import (
    BindRefusedError,
    ListenError,
    check_bind_allowed,
    listen_reason,
)
from scrollback.server.service_config import DEFAULT_STATE_TEXT, DEFAULT_TRANSCRIPTS
from scrollback.server.workers import can_share_port, current_role, supervise


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
EXIT_CONFIG = 2


def version() -> str:
    """The installed package's version."""
    try:
        return metadata.version("scrollback")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def plain(text: str | None) -> str | None:
    """Help text without the markdown backticks of the docstrings it comes from."""
    return text.replace("`", "") if text else text


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """`--version` prints `<prog> <version>`."""
    parser.add_argument("--version", action="version", version=f"{prog} {version()}")


def service_parser(
    prog: str,
    description: str | None,
    *,
    transcripts_help: str,
    state_help: str,
    addr_env: str,
    default_addr: str,
) -> argparse.ArgumentParser:
    """The flags of a service; flags override the environment."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=plain(description),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(parser, prog)
    parser.add_argument(
        "--transcripts",
        type=Path,
        help=f"{transcripts_help} (SCROLLBACK_TRANSCRIPTS, default {DEFAULT_TRANSCRIPTS})",
    )
    parser.add_argument(
        "--state", type=Path, help=f"{state_help} (SCROLLBACK_STATE, default {DEFAULT_STATE_TEXT})"
    )
    parser.add_argument(
        "--addr", help=f"HOST:PORT to listen on ({addr_env}, default {default_addr})"
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
        "--stall-timeout",
        type=float,
        metavar="SECONDS",
        help="end a stream whose client grants no flow-control window this long (default 60)",
    )
    parser.add_argument(
        "--database-url",
        help="postgresql:// URL of a shared database (SCROLLBACK_DATABASE_URL, default: SQLite "
        "in the state dir)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help=f"worker processes serving the one port ({addr_env.removesuffix('_ADDR')}_WORKERS, "
        "default: the number of cores)",
    )
    return parser


def with_auth_tokens(security: SecuritySettings, auth_tokens: Path) -> SecuritySettings:
    """The security settings with the token file of `--auth-tokens` (~ expanded)."""
    return dataclasses.replace(security, auth_tokens=auth_tokens.expanduser())


def run_service(
    name: str,
    build_config: Callable[[], ConfigT],
    serve: Callable[[ConfigT], Coroutine[Any, Any, None]],
    config_error: type[Exception],
    *,
    addr_env: str,
    argv: Sequence[str] | None = None,
) -> int:
    """Log to stderr, build the configuration and serve it; the process's exit status.

    A configuration of several workers (and this process not one of them)
    starts them instead, on the flags of `argv`, and waits for them.
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
        asyncio.run(serve(config))
    except ListenError as error:
        print(f"{name}: {error}; choose another with --addr or {addr_env}", file=sys.stderr)
        return EXIT_CONFIG
    except (config_error, BindRefusedError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return 0
