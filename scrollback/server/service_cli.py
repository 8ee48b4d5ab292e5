"""The command line both services share: `python -m history_service` / `python -m media_service`.

`service_parser` declares the flags (`--transcripts`, `--state`, `--addr`,
`--insecure`, `--auth-tokens`, `--stall-timeout`, `--database-url`); each service keeps its own
help texts and turns the parsed flags into its configuration.
`run_service` sets up logging, builds the configuration and serves until
SIGINT/SIGTERM: an unusable configuration or a refused bind prints
`<name>: <error>` to stderr and returns exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from scrollback.server.auth import SecuritySettings
from scrollback.server.grpc_support import BindRefusedError

ConfigT = TypeVar("ConfigT")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def service_parser(
    prog: str, description: str | None, *, transcripts_help: str, state_help: str
) -> argparse.ArgumentParser:
    """The flags of a service; flags override the environment."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--transcripts", type=Path, help=transcripts_help)
    parser.add_argument("--state", type=Path, help=state_help)
    parser.add_argument("--addr", help="HOST:PORT to listen on")
    parser.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without auth"
    )
    parser.add_argument(
        "--auth-tokens", type=Path, help="token file (YAML/JSON) of SCROLLBACK_AUTH_TOKENS"
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        metavar="SECONDS",
        help="end a stream whose client grants no flow-control window this long (default 60)",
    )
    parser.add_argument(
        "--database-url", help="postgresql:// URL of a shared database (SCROLLBACK_DATABASE_URL)"
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
) -> int:
    """Log to stderr, build the configuration and serve it; the process's exit status."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        config = build_config()
        asyncio.run(serve(config))
    except (config_error, BindRefusedError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
