"""The history service's configuration: a frozen dataclass read from the environment.

The idiom and the naming scheme are scrollback.server.service_config's: shared
settings are `SCROLLBACK_<FIELD>`, this service's own `SCROLLBACK_HISTORY_<FIELD>`,
and the flags of `python -m history_service` / `scrollback up` override them.

Shared: `SCROLLBACK_TRANSCRIPTS` (default `~/.claude/projects`), `SCROLLBACK_STATE`
(default `$XDG_STATE_HOME/scrollback` or `~/.local/state/scrollback`),
`SCROLLBACK_DATABASE_URL` (`postgresql://...`: the accepted messages and the bus
on PostgreSQL, shared by several replicas; unset, SQLite in the state dir; the
URL may hold a password: it is kept out of the repr and every error text),
`SCROLLBACK_MAX_LINE_SIZE` (default 16 MiB; the older
`SCROLLBACK_HISTORY_MAX_LINE_SIZE` still works, deprecated), and the security
settings (scrollback.server.auth: `SCROLLBACK_AUTH_TOKENS`,
`SCROLLBACK_TLS_CERT` / `_KEY` / `_CLIENT_CA`, `SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL`).

This service's (`SCROLLBACK_HISTORY_<FIELD>`, each field below): `ADDR` (default
`127.0.0.1:50051`), `METRICS_ADDR` (Prometheus endpoint, off when unset),
`STALL_TIMEOUT_SECONDS` (default 60, flag `--stall-timeout-seconds`: a stream
whose client grants no flow-control window that long is ended with
DEADLINE_EXCEEDED), and the limits `DEFAULT_INLINE_LIMIT`, `MAX_WINDOW_BYTES`,
`PENDING_KEEP`, `PENDING_TTL_SECONDS`, `HEARTBEAT_SECONDS`, `WATCH_POLL_SECONDS`,
`RESCAN_INTERVAL_SECONDS`, `BUS_RESYNC_SECONDS`, `ENTRY_CACHE_BYTES` (default 16 MiB per
worker process, 0 = off: window entries kept stripped and encoded, history_service.entry_cache),
`DECODE_THREADS` and `DECODE_MEMORY_BYTES` (default 2 and 512 MiB per worker: the threads
and memory budget of image decodes, the downscales of slim copies), `IMAGES_MEMORY_BYTES`
(default 128 MiB: what one ListImages call may hold to number a transcript's entries,
history_service.numbering), `SEARCH_INTERVAL_SECONDS` (default 2: how
often the search indexer catches up with the transcripts), `SEARCH_INDEXING`
(`off`, flag `--no-search-indexing`: serve searches without writing the index). `from_env` checks the values;
`validate()` also the locations and files, at start-up (ConfigError).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrollback.contract.limits import (
    DEFAULT_INLINE_LIMIT,
    DEFAULT_MAX_LINE_SIZE,
    MIN_INLINE_LIMIT,
)
from scrollback.server.auth import SecuritySettings
from scrollback.server.service_config import (
    DEFAULT_BUCKET_CACHE_BYTES,
    DEFAULT_STALL_TIMEOUT_SECONDS,
    DEFAULT_TRANSCRIPTS,
    ConfigError,
    check_database_url,
    check_locations,
    check_security,
    default_state_dir,
    gemini_home_setting,
    location_setting,
    read_server_values,
    with_overrides,
)
from scrollback.server.workers import MAX_WORKERS, default_workers

if TYPE_CHECKING:
    from scrollback.objects import Location

SERVICE = "history"
# The defaults live here, not in the modules that use them: the workers' parent
# loads this module only, and those modules load the protobuf runtime.
DEFAULT_ENTRY_CACHE_BYTES = 16 * 1024 * 1024
MAX_ENTRY_CACHE_BYTES = 1024 * 1024 * 1024
DEFAULT_DECODE_THREADS = 2
MAX_DECODE_THREADS = 64
DEFAULT_DECODE_MEMORY_BYTES = 512 * 1024 * 1024
# A budget under one 1 MP frame would refuse every photo.
MIN_DECODE_MEMORY_BYTES = 4 * 1024 * 1024
MAX_DECODE_MEMORY_BYTES = 64 * 1024**3
# Bytes one ListImages call may hold to number a transcript's entries (history_service.numbering).
DEFAULT_IMAGES_MEMORY_BYTES = 128 * 1024 * 1024
DEFAULT_ADDR = "127.0.0.1:50051"
# The largest block cache of a bucket a setting may ask for.
MAX_BUCKET_CACHE_BYTES = 16 * 1024**3
# Read as SCROLLBACK_<FIELD>: every server reads them alike.
SHARED_FIELDS = frozenset({"database_url", "max_line_size", "bucket_cache_bytes"})
DEPRECATED_NAMES = {"SCROLLBACK_MAX_LINE_SIZE": "SCROLLBACK_HISTORY_MAX_LINE_SIZE"}

__all__ = ["DEFAULT_ADDR", "ConfigError", "HistoryConfig"]


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    """Everything the history service needs to start."""

    # A directory or a bucket, parsed once (scrollback.server.service_config.location_setting).
    transcripts: Location = Path(DEFAULT_TRANSCRIPTS)
    # Codex CLI's sessions dir or prefix (service_config.codex_sessions_from_env); None: none.
    codex_sessions: Location | None = None
    # opencode's SQLite database (service_config.opencode_db_from_env); None: none.
    opencode_db: Path | None = None
    # Gemini CLI's home, a local dir (service_config.gemini_home_from_env); None: none.
    gemini_home: Path | None = None
    # Bytes of recently read object blocks kept per process when the transcripts are in a
    # bucket (scrollback.objects.BlockCache; SCROLLBACK_BUCKET_CACHE_BYTES); 0: none.
    bucket_cache_bytes: int = DEFAULT_BUCKET_CACHE_BYTES
    state_dir: Path = field(default_factory=default_state_dir)
    addr: str = DEFAULT_ADDR
    insecure: bool = False
    auth_configured: bool = False
    default_inline_limit: int = DEFAULT_INLINE_LIMIT
    max_line_size: int = DEFAULT_MAX_LINE_SIZE
    # Raw bytes one window may scan before it ends early (its token continues).
    max_window_bytes: int = 64 * 1024 * 1024
    # Window entries kept stripped and encoded, per worker process (0: off).
    entry_cache_bytes: int = DEFAULT_ENTRY_CACHE_BYTES
    # Image decodes (slim downscales), per worker: threads apart from those serving
    # reads, and the memory they reserve (scrollback.server.decode_budget).
    decode_threads: int = DEFAULT_DECODE_THREADS
    decode_memory_bytes: int = DEFAULT_DECODE_MEMORY_BYTES
    # Bytes one ListImages call may hold for the API numbering; past it CHAIN_TOO_LARGE.
    images_memory_bytes: int = DEFAULT_IMAGES_MEMORY_BYTES
    pending_keep: int = 50
    pending_ttl_seconds: float = 600.0
    heartbeat_seconds: float = 15.0
    watch_poll_seconds: float = 0.2
    rescan_interval_seconds: float = 2.0
    bus_resync_seconds: float = 1.0
    # How often the search indexer looks for grown, new, rewritten or gone transcripts.
    search_interval_seconds: float = 1.0
    # Off: this server answers searches from the index but does not write it
    # (another replica does, or a benchmark wants no background work).
    search_indexing: bool = True
    # A stream whose client grants no flow-control window this long is ended.
    stall_timeout_seconds: float = DEFAULT_STALL_TIMEOUT_SECONDS
    # Worker processes serving one port (scrollback.server.workers); 1: this process.
    workers: int = field(default_factory=default_workers)
    database_url: str = field(default="", repr=False)
    security: SecuritySettings = SecuritySettings()  # noqa: RUF009 - frozen, immutable

    def __post_init__(self) -> None:
        # A location given as text (a flag, a caller's value) is parsed here, once.
        object.__setattr__(self, "transcripts", location_setting(self.transcripts))
        if self.codex_sessions is not None:
            object.__setattr__(self, "codex_sessions", location_setting(self.codex_sessions))
        object.__setattr__(self, "gemini_home", gemini_home_setting(self.gemini_home))

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        auth_tokens: Path | None = None,
        **overrides: Any,
    ) -> HistoryConfig:
        """The environment's settings (os.environ by default), the set overrides winning.

        `auth_tokens` is the `--auth-tokens` flag (into `security`). The values
        are checked; the locations are left to `validate`.
        """
        source = os.environ if env is None else env
        values = read_server_values(
            cls,
            source,
            service=SERVICE,
            shared=SHARED_FIELDS,
            aliases=DEPRECATED_NAMES,
            auth_tokens=auth_tokens,
        )
        indexing = source.get("SCROLLBACK_HISTORY_SEARCH_INDEXING", "").strip().lower()
        if indexing:
            if indexing not in ("0", "1", "false", "true", "off", "on"):
                raise ConfigError("SCROLLBACK_HISTORY_SEARCH_INDEXING must be on or off")
            values["search_indexing"] = indexing in ("1", "true", "on")
        return cls(**with_overrides(values, overrides)).check_values()

    def validate(self) -> HistoryConfig:
        """Return self if the server can start on it (values, locations, files), else ConfigError."""
        self.check_values()
        check_locations(self.transcripts, self.state_dir, self.codex_sessions)
        check_security(self.security)
        return self

    def check_values(self) -> HistoryConfig:
        """Return self if every value is within bounds; raise ConfigError otherwise."""
        if not self.addr or ":" not in self.addr:
            raise ConfigError("the history address must be HOST:PORT")
        if not MIN_INLINE_LIMIT <= self.default_inline_limit <= self.max_line_size:
            raise ConfigError(
                "the default inline limit must lie between 1 KiB and the max line size"
            )
        if self.max_line_size < 64 * 1024:
            raise ConfigError("the max line size must be at least 64 KiB")
        if self.max_window_bytes < 1024 * 1024:
            raise ConfigError("the window byte budget must be at least 1 MiB")
        if not 0 <= self.entry_cache_bytes <= MAX_ENTRY_CACHE_BYTES:
            raise ConfigError("the entry cache size must lie between 0 (off) and 1 GiB")
        if not 1 <= self.decode_threads <= MAX_DECODE_THREADS:
            raise ConfigError(f"decode threads must be from 1 to {MAX_DECODE_THREADS}")
        if not MIN_DECODE_MEMORY_BYTES <= self.decode_memory_bytes <= MAX_DECODE_MEMORY_BYTES:
            raise ConfigError(
                f"the decode memory budget must be from {MIN_DECODE_MEMORY_BYTES} "
                f"to {MAX_DECODE_MEMORY_BYTES} bytes"
            )
        if not 1024 * 1024 <= self.images_memory_bytes <= 16 * 1024**3:
            raise ConfigError("the image list's memory budget must lie between 1 MiB and 16 GiB")
        if self.pending_keep < 1 or self.pending_ttl_seconds <= 0:
            raise ConfigError(
                "pending retention must keep at least one message for a positive time"
            )
        if self.heartbeat_seconds <= 0 or self.watch_poll_seconds <= 0:
            raise ConfigError("heartbeat and poll intervals must be positive")
        if self.search_interval_seconds <= 0:
            raise ConfigError("the search indexing interval must be positive")
        if self.bus_resync_seconds <= 0:
            raise ConfigError("the bus resync interval must be positive")
        if self.stall_timeout_seconds <= 0:
            raise ConfigError("the stall timeout must be positive")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ConfigError(f"workers must be from 1 to {MAX_WORKERS}")
        if self.rescan_interval_seconds < 0:
            raise ConfigError("the rescan interval must not be negative")
        check_database_url(self.database_url)
        if not 0 <= self.bucket_cache_bytes <= MAX_BUCKET_CACHE_BYTES:
            raise ConfigError("the bucket cache size must lie between 0 (off) and 16 GiB")
        return self
