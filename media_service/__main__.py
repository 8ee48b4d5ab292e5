"""`python -m media_service [--transcripts DIR] [--state DIR] [--addr HOST:PORT] [--insecure]`.

Flags override the environment (SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE,
SCROLLBACK_MEDIA_ADDR, SCROLLBACK_DATABASE_URL); invalid configuration exits with
status 2. `--database-url postgresql://...` keeps blob metadata in a database
shared by several replicas (prefer the environment variable for a password).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from pathlib import Path

from media_service.config import MediaConfig
from media_service.errors import ConfigError
from media_service.server import serve
from scrollback.grpc_support import BindRefusedError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m media_service", description=__doc__)
    parser.add_argument("--transcripts", type=Path, help="transcripts root")
    parser.add_argument("--state", type=Path, help="state dir (blobs and database)")
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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the media service in the foreground."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = MediaConfig.from_env()
        overrides: dict[str, object] = {"insecure": args.insecure}
        if args.transcripts is not None:
            overrides["transcripts"] = args.transcripts
        if args.state is not None:
            overrides["state"] = args.state
        if args.addr is not None:
            overrides["addr"] = args.addr
        if args.database_url:
            overrides["database_url"] = args.database_url
        if args.auth_tokens is not None:
            overrides["security"] = dataclasses.replace(
                config.security, auth_tokens=args.auth_tokens.expanduser()
            )
        config = config.with_overrides(**overrides)
        asyncio.run(serve(config))
    except (ConfigError, BindRefusedError) as error:
        print(f"media_service: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
