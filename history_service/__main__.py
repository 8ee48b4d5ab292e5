"""`python -m history_service [--transcripts DIR] [--state DIR] [--addr HOST:PORT] [--insecure]`.

Flags override the environment (SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE,
SCROLLBACK_HISTORY_ADDR, SCROLLBACK_DATABASE_URL, ...: history_service.config);
an unusable configuration exits with status 2. `--database-url postgresql://...`
runs this replica on PostgreSQL (prefer the environment variable when the URL
holds a password: a flag is visible in the process list).
"""

from __future__ import annotations

import argparse
import sys

from history_service.config import DEFAULT_ADDR, SERVICE, HistoryConfig
from scrollback.server.service_cli import run_service, service_parser, shared_overrides
from scrollback.server.service_config import env_name


def config_from_args(args: argparse.Namespace) -> HistoryConfig:
    """The environment's configuration with the flags applied."""
    return HistoryConfig.from_env(
        addr=args.addr,
        workers=args.workers,
        search_indexing=False if getattr(args, "no_search_indexing", False) else None,
        **shared_overrides(args),
    )


def main(argv: list[str] | None = None) -> int:
    """Parse flags, then serve until SIGINT/SIGTERM."""
    parser = service_parser(
        "python -m history_service", __doc__, service=SERVICE, default_addr=DEFAULT_ADDR
    )
    parser.add_argument(
        "--no-search-indexing",
        action="store_true",
        help="answer searches without writing the search index (SCROLLBACK_HISTORY_SEARCH_INDEXING=off)",
    )
    args = parser.parse_args(argv)
    return run_service(
        "history_service",
        lambda: config_from_args(args),
        addr_env=env_name("addr", SERVICE),
        argv=sys.argv[1:] if argv is None else argv,
    )


if __name__ == "__main__":
    sys.exit(main())
