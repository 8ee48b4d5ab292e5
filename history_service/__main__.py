"""`python -m history_service [--transcripts DIR] [--state DIR] [--addr HOST:PORT] [--insecure]`.

Flags override the environment (SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE,
SCROLLBACK_HISTORY_ADDR, SCROLLBACK_DATABASE_URL). `--database-url postgresql://...`
runs this replica on PostgreSQL (prefer the environment variable when the URL
holds a password: a flag is visible in the process list).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from pathlib import Path

from history_service.config import ConfigError, HistoryConfig
from history_service.server import serve
from scrollback.grpc_support import BindRefusedError


def main(argv: list[str] | None = None) -> int:
    """Parse flags, then serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m history_service", description=__doc__)
    parser.add_argument("--transcripts", type=Path, help="the transcripts root")
    parser.add_argument("--state", type=Path, help="the state dir")
    parser.add_argument("--addr", help="HOST:PORT to listen on")
    parser.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without auth"
    )
    parser.add_argument(
        "--auth-tokens", type=Path, help="token file (YAML/JSON) of SCROLLBACK_AUTH_TOKENS"
    )
    parser.add_argument(
        "--database-url", help="postgresql:// URL of a shared database (SCROLLBACK_DATABASE_URL)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = HistoryConfig.from_env(
            transcripts=args.transcripts.expanduser() if args.transcripts else None,
            state_dir=args.state.expanduser() if args.state else None,
            addr=args.addr,
            insecure=args.insecure or None,
            database_url=args.database_url or None,
        )
        if args.auth_tokens is not None:
            config = dataclasses.replace(
                config,
                security=dataclasses.replace(
                    config.security, auth_tokens=args.auth_tokens.expanduser()
                ),
            )
        asyncio.run(serve(config))
    except (ConfigError, BindRefusedError) as error:
        print(f"history_service: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
