"""`python -m media_service [--transcripts DIR] [--state DIR] [--addr HOST:PORT] [--insecure]`.

Flags override the environment (SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE,
SCROLLBACK_MEDIA_ADDR, SCROLLBACK_DATABASE_URL,
SCROLLBACK_MEDIA_WRITE_DEADLINE_SECONDS, ...: media_service.config); an unusable
configuration exits with status 2. `--database-url postgresql://...` keeps blob
metadata in a database shared by several replicas (prefer the environment
variable for a password).
"""

from __future__ import annotations

import argparse
import sys

from media_service.config import (
    DEFAULT_ADDR,
    DEFAULT_WRITE_DEADLINE_SECONDS,
    SERVICE,
    MediaConfig,
)
from scrollback.server.service_cli import run_service, service_parser, shared_overrides
from scrollback.server.service_config import env_name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = service_parser(
        "python -m media_service",
        __doc__,
        service=SERVICE,
        default_addr=DEFAULT_ADDR,
        state_help="the state dir (blobs and database)",
    )
    parser.add_argument(
        "--write-deadline-seconds",
        type=float,
        metavar="SECONDS",
        help="the longest one WriteBlob upload may take "
        f"({env_name('write_deadline_seconds', SERVICE)}, "
        f"default {DEFAULT_WRITE_DEADLINE_SECONDS:g})",
    )
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> MediaConfig:
    """The environment's configuration with the flags applied."""
    return MediaConfig.from_env(
        addr=args.addr,
        workers=args.workers,
        write_deadline_seconds=args.write_deadline_seconds,
        **shared_overrides(args),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the media service in the foreground."""
    args = parse_args(argv)
    return run_service(
        "media_service",
        lambda: config_from_args(args),
        addr_env=env_name("addr", SERVICE),
        argv=sys.argv[1:] if argv is None else argv,
    )


if __name__ == "__main__":
    sys.exit(main())
