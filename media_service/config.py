"""The media service's configuration: a frozen dataclass read from the environment.

The idiom and the naming scheme are scrollback.server.service_config's: shared
settings are `SCROLLBACK_<FIELD>`, this service's own `SCROLLBACK_MEDIA_<FIELD>`,
and the flags of `python -m media_service` / `scrollback up` override them.

Shared: `SCROLLBACK_TRANSCRIPTS`, `SCROLLBACK_STATE` (the same defaults as
history), `SCROLLBACK_DATABASE_URL` (`postgresql://...`: blob metadata in
PostgreSQL, shared by several replicas whose state dirs, the blob bytes, are one
shared volume; unset, SQLite in the state dir; the URL is kept out of the repr
and every error text), `SCROLLBACK_MAX_LINE_SIZE` (default 16 MiB) and the
security settings (scrollback.server.auth).

This service's (`SCROLLBACK_MEDIA_<FIELD>`, each field below): `ADDR` (default
`127.0.0.1:50052`), `METRICS_ADDR` (Prometheus endpoint, off when unset),
`CHUNK_SIZE` (default 64 KiB), `MAX_BLOB_SIZE` (default 64 MiB),
`GC_GRACE_SECONDS` / `GC_INTERVAL_SECONDS` (defaults 3600 / 600),
`LINE_CACHE_ENTRIES` (4096), `WRITE_IDLE_TIMEOUT_SECONDS` (default 30: a
WriteBlob client silent that long is cut off with DEADLINE_EXCEEDED and its
upload discarded), `WRITE_DEADLINE_SECONDS` (default 600, flag
`--write-deadline-seconds`: the longest a whole WriteBlob may take, however
steadily it drips), `STALL_TIMEOUT_SECONDS` (default 60, flag
`--stall-timeout-seconds`: a stream whose client grants no flow-control window
that long is ended with DEADLINE_EXCEEDED), `THUMBNAIL_THREADS` (default 2: the
threads that encode thumbnails, apart from those that serve reads), `SEARCH_THREADS`
(default 2: the threads StatMedia's transcript searches run on, apart from those
that serve reads),
`THUMBNAIL_MEMORY_BYTES` (default 512 MiB per worker: the memory budget that
thumbnail encodes reserve from before they decode, one RGBA frame of the
original each, media_service.thumbnail_encodes),
`DECODED_CACHE_BYTES` (default 64 MiB per worker, 0: off: decoded transcript
images up to 16 MiB kept ready to send, media_service.decoded), `WORKERS`
(default: the cores this process may use, flag `--workers`: worker processes
serving one port, scrollback.server.workers). The older names
`SCROLLBACK_MAX_BLOB_SIZE`, `SCROLLBACK_GC_GRACE_SECONDS` and
`SCROLLBACK_GC_INTERVAL_SECONDS` still work, deprecated.

`from_env` checks the values (`scrollback gc` needs no transcripts root);
`validate()` also the locations and files, at start-up (ConfigError).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrollback.contract.limits import DEFAULT_MAX_LINE_SIZE
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

SERVICE = "media"
KIB = 1024
MIB = 1024 * KIB
DEFAULT_ADDR = "127.0.0.1:50052"
# The defaults live here, not in the modules that use them: the workers' parent
# loads this module only, and those modules load the protobuf runtime.
DEFAULT_DECODED_CACHE_BYTES = 64 * MIB
DEFAULT_CHUNK_SIZE = 64 * KIB
MAX_CHUNK_SIZE = 256 * KIB
DEFAULT_MAX_BLOB_SIZE = 64 * MIB
DEFAULT_GC_GRACE_SECONDS = 3600.0
DEFAULT_GC_INTERVAL_SECONDS = 600.0
DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS = 30.0
DEFAULT_WRITE_DEADLINE_SECONDS = 600.0
DEFAULT_THUMBNAIL_THREADS = 2
DEFAULT_SEARCH_THREADS = 2
MAX_SEARCH_THREADS = 64
MAX_THUMBNAIL_THREADS = 64
DEFAULT_THUMBNAIL_MEMORY_BYTES = 512 * MIB
# A budget under one 1 MP frame would serialize every encode of a photo.
MIN_THUMBNAIL_MEMORY_BYTES = 4 * MIB
MAX_THUMBNAIL_MEMORY_BYTES = 64 * 1024 * MIB
# Per worker: a bound that keeps a mistyped size from taking the machine's memory.
MAX_DECODED_CACHE_BYTES = 4096 * MIB
# The largest block cache of a bucket a setting may ask for.
MAX_BUCKET_CACHE_BYTES = 16 * 1024**3
# Read as SCROLLBACK_<FIELD>: every server reads them alike.
SHARED_FIELDS = frozenset({"database_url", "max_line_size", "bucket_cache_bytes"})
DEPRECATED_NAMES = {
    "SCROLLBACK_MEDIA_MAX_BLOB_SIZE": "SCROLLBACK_MAX_BLOB_SIZE",
    "SCROLLBACK_MEDIA_GC_GRACE_SECONDS": "SCROLLBACK_GC_GRACE_SECONDS",
    "SCROLLBACK_MEDIA_GC_INTERVAL_SECONDS": "SCROLLBACK_GC_INTERVAL_SECONDS",
}

__all__ = ["DEFAULT_ADDR", "ConfigError", "MediaConfig"]


@dataclass(frozen=True, slots=True)
class MediaConfig:
    """Everything the media server needs to start."""

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
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_line_size: int = DEFAULT_MAX_LINE_SIZE
    max_blob_size: int = DEFAULT_MAX_BLOB_SIZE
    gc_grace_seconds: float = DEFAULT_GC_GRACE_SECONDS
    gc_interval_seconds: float = DEFAULT_GC_INTERVAL_SECONDS
    line_cache_entries: int = 4096
    write_idle_timeout_seconds: float = DEFAULT_WRITE_IDLE_TIMEOUT_SECONDS
    write_deadline_seconds: float = DEFAULT_WRITE_DEADLINE_SECONDS
    stall_timeout_seconds: float = DEFAULT_STALL_TIMEOUT_SECONDS
    thumbnail_threads: int = DEFAULT_THUMBNAIL_THREADS
    # StatMedia's transcript searches run on these threads, apart from those serving reads.
    search_threads: int = DEFAULT_SEARCH_THREADS
    # The memory thumbnail encodes reserve from, per worker (media_service.thumbnail_encodes).
    thumbnail_memory_bytes: int = DEFAULT_THUMBNAIL_MEMORY_BYTES
    # Decoded transcript images kept per worker, ready to send (media_service.decoded); 0: off.
    decoded_cache_bytes: int = DEFAULT_DECODED_CACHE_BYTES
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
    ) -> MediaConfig:
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
        return cls(**with_overrides(values, overrides)).check_values()

    def validate(self) -> MediaConfig:
        """Return self if the server can start on it (values, locations, files), else ConfigError."""
        self.check_values()
        check_locations(self.transcripts, self.state_dir, self.codex_sessions)
        check_security(self.security)
        return self

    def check_values(self) -> MediaConfig:
        """Return self if every value is within bounds; raise ConfigError otherwise."""
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
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ConfigError(f"workers must be from 1 to {MAX_WORKERS}")
        if not 1 <= self.thumbnail_threads <= MAX_THUMBNAIL_THREADS:
            raise ConfigError(f"thumbnail threads must be from 1 to {MAX_THUMBNAIL_THREADS}")
        if not 1 <= self.search_threads <= MAX_SEARCH_THREADS:
            raise ConfigError(f"search threads must be from 1 to {MAX_SEARCH_THREADS}")
        if (
            not MIN_THUMBNAIL_MEMORY_BYTES
            <= self.thumbnail_memory_bytes
            <= MAX_THUMBNAIL_MEMORY_BYTES
        ):
            raise ConfigError(
                f"thumbnail memory must be from {MIN_THUMBNAIL_MEMORY_BYTES} "
                f"to {MAX_THUMBNAIL_MEMORY_BYTES} bytes"
            )
        if not 0 <= self.decoded_cache_bytes <= MAX_DECODED_CACHE_BYTES:
            raise ConfigError(
                f"decoded cache size must be from 0 (off) to {MAX_DECODED_CACHE_BYTES} bytes"
            )
        check_database_url(self.database_url)
        if not 0 <= self.bucket_cache_bytes <= MAX_BUCKET_CACHE_BYTES:
            raise ConfigError("the bucket cache size must lie between 0 (off) and 16 GiB")
        return self
