"""The media service's configuration: defaults, environment, validation.

`MediaConfig.from_env()` reads SCROLLBACK_TRANSCRIPTS, SCROLLBACK_STATE (the
same defaults as history: scrollback.server.service_config), SCROLLBACK_MEDIA_ADDR and
the SCROLLBACK_MEDIA_* tuning variables; `validate()` raises ConfigError for
values out of bounds or a transcripts root that is not a directory, at start-up.

Security (`security`, shared with the history service, see scrollback.server.auth):
`SCROLLBACK_AUTH_TOKENS`, `SCROLLBACK_TLS_CERT` / `_KEY` / `_CLIENT_CA`,
`SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL` (default 64) and
`SCROLLBACK_MEDIA_METRICS_ADDR` (Prometheus endpoint, off when unset).
`SCROLLBACK_DATABASE_URL` (`postgresql://...`) keeps blob metadata in
PostgreSQL, shared by several replicas whose state dirs (the blob bytes) are
one shared volume; unset, the embedded SQLite database in the state dir. The
URL may hold a password: it is kept out of the repr and every error text.
`SCROLLBACK_MEDIA_WRITE_IDLE_TIMEOUT_SECONDS` (default 30): a WriteBlob client
silent that long is cut off with DEADLINE_EXCEEDED and its upload discarded.
`SCROLLBACK_MEDIA_WRITE_DEADLINE_SECONDS` (default 600, flag
`--write-deadline-seconds`): the longest a whole WriteBlob may take, however
steadily it drips; past it the upload is cut off the same way.
`SCROLLBACK_MEDIA_STALL_TIMEOUT_SECONDS` (default 60, flag `--stall-timeout`): a
stream whose client grants no flow-control window that long is ended with
DEADLINE_EXCEEDED.
`SCROLLBACK_MEDIA_WORKERS` (flag `--workers`, default: the cores this process
may use): worker processes serving one port, see scrollback.server.workers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from media_service.errors import ConfigError
from scrollback.contract.stripping import DEFAULT_MAX_LINE_SIZE
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
from scrollback.server.workers import default_workers
from scrollback.state.urls import DATABASE_URL_ENV

KIB = 1024
MIB = 1024 * KIB
DEFAULT_ADDR = "127.0.0.1:50052"
DEFAULT_CHUNK_SIZE = 64 * KIB
MAX_CHUNK_SIZE = 256 * KIB
DEFAULT_MAX_BLOB_SIZE = 64 * MIB
DEFAULT_GC_GRACE_SECONDS = 3600.0
DEFAULT_GC_INTERVAL_SECONDS = 600.0
DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS = 30.0
DEFAULT_WRITE_DEADLINE_SECONDS = 600.0


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name} must be an integer") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number") from None


@dataclass(frozen=True, slots=True)
class MediaConfig:
    """Everything the media server needs to start."""

    transcripts: Path = Path(DEFAULT_TRANSCRIPTS)
    state: Path = field(default_factory=default_state_dir)
    addr: str = DEFAULT_ADDR
    insecure: bool = False
    auth_configured: bool = False
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_line_size: int = DEFAULT_MAX_LINE_SIZE
    max_blob_size: int = DEFAULT_MAX_BLOB_SIZE
    gc_grace_seconds: float = DEFAULT_GC_GRACE_SECONDS
    gc_interval_seconds: float = DEFAULT_GC_INTERVAL_SECONDS
    line_cache_entries: int = 4096
    write_idle_timeout_seconds: float = DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS
    write_deadline_seconds: float = DEFAULT_WRITE_DEADLINE_SECONDS
    stall_timeout_seconds: float = DEFAULT_STALL_TIMEOUT_SECONDS
    database_url: str = field(default="", repr=False)
    security: SecuritySettings = SecuritySettings()  # noqa: RUF009 - frozen, immutable
    # Worker processes serving the one port (scrollback.server.workers).
    workers: int = field(default_factory=default_workers)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MediaConfig:
        """Read the configuration from the environment (values checked, not locations)."""
        env = os.environ if env is None else env
        security = security_from_env(
            env, metrics_var="SCROLLBACK_MEDIA_METRICS_ADDR", config_error=ConfigError
        )
        config = cls(
            transcripts=transcripts_from_env(env),
            state=state_dir_from_env(env),
            addr=env.get("SCROLLBACK_MEDIA_ADDR") or DEFAULT_ADDR,
            chunk_size=_int(env, "SCROLLBACK_MEDIA_CHUNK_SIZE", DEFAULT_CHUNK_SIZE),
            max_line_size=_int(env, "SCROLLBACK_MAX_LINE_SIZE", DEFAULT_MAX_LINE_SIZE),
            max_blob_size=_int(env, "SCROLLBACK_MAX_BLOB_SIZE", DEFAULT_MAX_BLOB_SIZE),
            gc_grace_seconds=_float(env, "SCROLLBACK_GC_GRACE_SECONDS", DEFAULT_GC_GRACE_SECONDS),
            gc_interval_seconds=_float(
                env, "SCROLLBACK_GC_INTERVAL_SECONDS", DEFAULT_GC_INTERVAL_SECONDS
            ),
            write_idle_timeout_seconds=_float(
                env,
                "SCROLLBACK_MEDIA_WRITE_IDLE_TIMEOUT_SECONDS",
                DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS,
            ),
            write_deadline_seconds=_float(
                env, "SCROLLBACK_MEDIA_WRITE_DEADLINE_SECONDS", DEFAULT_WRITE_DEADLINE_SECONDS
            ),
            stall_timeout_seconds=_float(
                env, "SCROLLBACK_MEDIA_STALL_TIMEOUT_SECONDS", DEFAULT_STALL_TIMEOUT_SECONDS
            ),
            database_url=env.get(DATABASE_URL_ENV) or "",
            security=security,
            workers=_int(env, "SCROLLBACK_MEDIA_WORKERS", default_workers()),
        )
        return config.check_values()

    def with_overrides(self, **changes: object) -> MediaConfig:
        """A copy with some fields replaced (flags over env), values checked."""
        return replace(self, **changes).check_values()  # type: ignore[arg-type]

    def validate(self) -> MediaConfig:
        """Return self if the server can start on it (values and locations), else ConfigError."""
        self.check_values()
        check_locations(self.transcripts_root, self.state_dir, config_error=ConfigError)
        return self

    def check_values(self) -> MediaConfig:
        """Return self if every value is within bounds; raise ConfigError otherwise.

        The locations are left to `validate` (at server start): `scrollback gc`
        reads this configuration and needs no transcripts root.
        """
        if not 1 <= self.chunk_size <= MAX_CHUNK_SIZE:
            raise ConfigError(f"chunk size must be from 1 to {MAX_CHUNK_SIZE} bytes")
        if self.max_line_size < 1024:
            raise ConfigError("max line size must be at least 1024 bytes")
        if not 1 <= self.max_blob_size <= 2**40:
            raise ConfigError("max blob size must be from 1 byte to 1 TiB")
        if self.gc_grace_seconds < 0:
            raise ConfigError("gc grace period must not be negative")
        if self.gc_interval_seconds <= 0:
            raise ConfigError("gc interval must be positive")
        if self.line_cache_entries < 0:
            raise ConfigError("line cache size must not be negative")
        if not self.addr or ":" not in self.addr:
            raise ConfigError("address must be HOST:PORT")
        if self.write_idle_timeout_seconds <= 0:
            raise ConfigError("the write idle timeout must be positive")
        if self.write_deadline_seconds <= 0:
            raise ConfigError("the write deadline must be positive")
        if self.stall_timeout_seconds <= 0:
            raise ConfigError("the stall timeout must be positive")
        if self.workers < 1:
            raise ConfigError("the number of workers must be at least 1")
        validate_shared(self.database_url, self.security, config_error=ConfigError)
        return self

    @property
    def transcripts_root(self) -> Path:
        """The transcripts root with ~ expanded."""
        return self.transcripts.expanduser()

    @property
    def state_dir(self) -> Path:
        """The state dir with ~ expanded."""
        return self.state.expanduser()
