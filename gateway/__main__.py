"""`python -m gateway [--addr HOST:PORT] [--history-addr A] [--media-addr A] [--insecure]`.

Flags override the environment (SCROLLBACK_GATEWAY_ADDR, SCROLLBACK_HISTORY_ADDR,
SCROLLBACK_MEDIA_ADDR, SCROLLBACK_AUTH_TOKENS; see gateway.config); an unusable
configuration exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from client import DEFAULT_HISTORY_ADDR, DEFAULT_MEDIA_ADDR
from gateway.config import DEFAULT_ADDR, GatewayConfig
from scrollback.server.service_cli import run_service


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gateway's flags (shared with `scrollback gateway`)."""
    parser.add_argument(
        "--addr", help=f"HOST:PORT to listen on (SCROLLBACK_GATEWAY_ADDR, default {DEFAULT_ADDR})"
    )
    parser.add_argument(
        "--history-addr",
        help=f"history service (SCROLLBACK_HISTORY_ADDR, default {DEFAULT_HISTORY_ADDR})",
    )
    parser.add_argument(
        "--media-addr",
        help=f"media service (SCROLLBACK_MEDIA_ADDR, default {DEFAULT_MEDIA_ADDR})",
    )
    parser.add_argument(
        "--auth-tokens",
        type=Path,
        help="callers' token file (SCROLLBACK_AUTH_TOKENS, default: no auth)",
    )
    parser.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without auth"
    )


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    """The environment's configuration with the flags applied."""
    return GatewayConfig.from_env(
        addr=args.addr or None,
        history_addr=args.history_addr or None,
        media_addr=args.media_addr or None,
        auth_tokens=args.auth_tokens.expanduser() if args.auth_tokens else None,
        insecure=args.insecure or None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gateway in the foreground."""
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_service(
        "gateway",
        lambda: config_from_args(args),
        addr_env="SCROLLBACK_GATEWAY_ADDR",
    )


if __name__ == "__main__":
    sys.exit(main())
