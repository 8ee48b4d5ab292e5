"""The history service's configuration: a frozen dataclass read from the environment.

`HistoryConfig.from_env()` reads `SCROLLBACK_TRANSCRIPTS` (default
`~/.claude/projects`), `SCROLLBACK_STATE` (default `$XDG_STATE_HOME/scrollback`
or `~/.local/state/scrollback`, see scrollback.server.service_config),
`SCROLLBACK_HISTORY_ADDR` (default `127.0.0.1:50051`) and optional limits
(`SCROLLBACK_HISTORY_*`, e.g. `SCROLLBACK_HISTORY_STALL_TIMEOUT_SECONDS`, default
60, flag `--stall-timeout`: a stream whose client grants no flow-control
window that long is ended with DEADLINE_EXCEEDED). `validate()` raises `ConfigError` with a clear text.

Security (`security`, shared with the media service, see scrollback.server.auth):
`SCROLLBACK_AUTH_TOKENS`, `SCROLLBACK_TLS_CERT` / `_KEY` / `_CLIENT_CA`,
`SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` (default 64) and
`SCROLLBACK_HISTORY_METRICS_ADDR` (Prometheus endpoint, off when unset).

`SCROLLBACK_HISTORY_SEARCH_INTERVAL_SECONDS` (default 2): how often the search
indexer catches up with the transcripts; `SCROLLBACK_HISTORY_SEARCH_INDEXING=off`
(flag `--no-search-indexing`): serve searches without writing the index.

`SCROLLBACK_DATABASE_URL` (`postgresql://...`) puts the accepted messages,
the search index and the bus on PostgreSQL, shared by several replicas; unset, the embedded SQLite
database in the state dir. The URL may hold a password: it is kept out of
the dataclass repr and out of every error text.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scrollback.contract.stripping import (
    DEFAULT_INLINE_LIMIT,
    DEFAULT_MAX_LINE_SIZE,
    MIN_INLINE_LIMIT,
)
from scrollback.server.auth import SecuritySettings
from scrollback.server.interceptors import DEFAULT_STALL_TIMEOUT_SECONDS
from scrollback.server.service_config import (
    DEFAULT_TRANSCRIPTS,
    check_locations,
    default_state_dir,
    security_from_env,
    state_dir_from_env,
    transcripts_from_env,
    validate_shared,
)
from scrollback.state.urls import DATABASE_URL_ENV

DEFAULT_ADDR = "127.0.0.1:50051"


class ConfigError(ValueError):
    """A configuration value that cannot be used."""


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    """Everything the history service needs to start."""

    transcripts: Path = Path(DEFAULT_TRANSCRIPTS)
    state_dir: Path = field(default_factory=default_state_dir)
    addr: str = DEFAULT_ADDR
    insecure: bool = False
    auth_configured: bool = False
    default_inline_limit: int = DEFAULT_INLINE_LIMIT
    max_line_size: int = DEFAULT_MAX_LINE_SIZE
    # Raw bytes one window may scan before it ends early (its token continues).
    max_window_bytes: int = 64 * 1024 * 1024
    pending_keep: int = 50
    pending_ttl_seconds: float = 600.0
    heartbeat_seconds: float = 15.0
    watch_poll_seconds: float = 0.2
    rescan_interval_seconds: float = 2.0
    bus_resync_seconds: float = 1.0
    # How often the search indexer looks for grown, new, rewritten or gone transcripts.
    search_interval_seconds: float = 2.0
    # Off: this server answers searches from the index but does not write it
    # (another replica does, or a benchmark wants no background work).
    search_indexing: bool = True
    # A stream whose client grants no flow-control window this long is ended.
    stall_timeout_seconds: float = DEFAULT_STALL_TIMEOUT_SECONDS
    database_url: str = field(default="", repr=False)
    security: SecuritySettings = SecuritySettings()  # noqa: RUF009 - frozen, immutable

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> HistoryConfig:
        """Build from the environment (os.environ by default); keyword overrides win."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {
            "transcripts": transcripts_from_env(source),
            "state_dir": state_dir_from_env(source),
            "addr": source.get("SCROLLBACK_HISTORY_ADDR", DEFAULT_ADDR),
            "database_url": source.get(DATABASE_URL_ENV, ""),
        }
        values["security"] = security_from_env(
            source, metrics_var="SCROLLBACK_HISTORY_METRICS_ADDR", config_error=ConfigError
        )
        numeric: dict[str, type] = {
            "default_inline_limit": int,
            "max_line_size": int,
            "max_window_bytes": int,
            "pending_keep": int,
            "pending_ttl_seconds": float,
            "heartbeat_seconds": float,
            "watch_poll_seconds": float,
            "rescan_interval_seconds": float,
            "bus_resync_seconds": float,
            "search_interval_seconds": float,
            "stall_timeout_seconds": float,
        }
        for name, kind in numeric.items():
            key = "SCROLLBACK_HISTORY_" + name.upper()
            if key in source:
                try:
                    values[name] = kind(source[key])
                except ValueError:
                    raise ConfigError(f"{key} must be a number") from None
        indexing = source.get("SCROLLBACK_HISTORY_SEARCH_INDEXING", "").strip().lower()
        if indexing:
            if indexing not in ("0", "1", "false", "true", "off", "on"):
                raise ConfigError("SCROLLBACK_HISTORY_SEARCH_INDEXING must be on or off")
            values["search_indexing"] = indexing in ("1", "true", "on")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values)

    def validate(self) -> HistoryConfig:
        """Return self if usable, else raise ConfigError."""
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
        if self.rescan_interval_seconds < 0:
            raise ConfigError("the rescan interval must not be negative")
        check_locations(self.transcripts, self.state_dir, config_error=ConfigError)
        validate_shared(self.database_url, self.security, config_error=ConfigError)
        return self
