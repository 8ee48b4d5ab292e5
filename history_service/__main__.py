"""`python -m history_service [--transcripts DIR] [--state DIR] [--addr HOST:PORT] [--insecure]`.

Flags override the environment (SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE,
SCROLLBACK_HISTORY_ADDR, SCROLLBACK_DATABASE_URL). `--database-url postgresql://...`
runs this replica on PostgreSQL (prefer the environment variable when the URL
holds a password: a flag is visible in the process list).
"""

from __future__ import annotations

import dataclasses
import sys

from history_service.config import DEFAULT_ADDR, ConfigError, HistoryConfig
from history_service.server import serve
from scrollback.server.service_cli import run_service, service_parser, with_auth_tokens


def main(argv: list[str] | None = None) -> int:
    """Parse flags, then serve until SIGINT/SIGTERM."""
    parser = service_parser(
        "python -m history_service",
        __doc__,
        transcripts_help="the transcripts root",
        state_help="the state dir",
        addr_env="SCROLLBACK_HISTORY_ADDR",
        default_addr=DEFAULT_ADDR,
    )
    parser.add_argument(
        "--no-search-indexing",
        action="store_true",
        help="answer searches without writing the search index (SCROLLBACK_HISTORY_SEARCH_INDEXING=off)",
    )
    args = parser.parse_args(argv)

    def build_config() -> HistoryConfig:
        config = HistoryConfig.from_env(
            transcripts=args.transcripts.expanduser() if args.transcripts else None,
            state_dir=args.state.expanduser() if args.state else None,
            addr=args.addr,
            insecure=args.insecure or None,
            database_url=args.database_url or None,
            stall_timeout_seconds=args.stall_timeout,
            search_indexing=False if args.no_search_indexing else None,
        )
        if args.auth_tokens is not None:
            config = dataclasses.replace(
                config, security=with_auth_tokens(config.security, args.auth_tokens)
            )
        return config

    return run_service(
        "history_service", build_config, serve, ConfigError, addr_env="SCROLLBACK_HISTORY_ADDR"
    )


if __name__ == "__main__":
    sys.exit(main())
