"""`python -m media_service [--transcripts DIR] [--state DIR] [--addr HOST:PORT] [--insecure]`.

Flags override the environment (SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE,
SCROLLBACK_MEDIA_ADDR, SCROLLBACK_DATABASE_URL,
SCROLLBACK_MEDIA_WRITE_DEADLINE_SECONDS); invalid configuration exits with
status 2. `--database-url postgresql://...` keeps blob metadata in a database
shared by several replicas (prefer the environment variable for a password).
"""

from __future__ import annotations

import argparse
import sys

from media_service.config import DEFAULT_ADDR, MediaConfig
from media_service.errors import ConfigError
from media_service.server import serve
from scrollback.server.service_cli import run_service, service_parser, with_auth_tokens


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = service_parser(
        "python -m media_service",
        __doc__,
        transcripts_help="transcripts root",
        state_help="state dir (blobs and database)",
        addr_env="SCROLLBACK_MEDIA_ADDR",
        default_addr=DEFAULT_ADDR,
    )
    parser.add_argument(
        "--write-deadline-seconds",
        type=float,
        help="the longest one WriteBlob upload may take (default 600)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the media service in the foreground."""
    args = parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv

    def build_config() -> MediaConfig:
        config = MediaConfig.from_env()
        overrides: dict[str, object] = {"insecure": args.insecure}
        if args.transcripts is not None:
            overrides["transcripts"] = args.transcripts
        if args.state is not None:
            overrides["state"] = args.state
        if args.addr is not None:
            overrides["addr"] = args.addr
        if args.write_deadline_seconds is not None:
            overrides["write_deadline_seconds"] = args.write_deadline_seconds
        if args.stall_timeout is not None:
            overrides["stall_timeout_seconds"] = args.stall_timeout
        if args.workers is not None:
            overrides["workers"] = args.workers
        if args.database_url:
            overrides["database_url"] = args.database_url
        if args.auth_tokens is not None:
            overrides["security"] = with_auth_tokens(config.security, args.auth_tokens)
        return config.with_overrides(**overrides)

    return run_service(
        "media_service",
        build_config,
        serve,
        ConfigError,
        addr_env="SCROLLBACK_MEDIA_ADDR",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
