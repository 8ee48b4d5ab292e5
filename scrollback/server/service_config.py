"""Configuration rules every server shares: one idiom, one naming scheme, one `ConfigError`.

The idiom (`HistoryConfig`, `MediaConfig`, `GatewayConfig`): a frozen
dataclass; `from_env(env=None, **overrides)` reads the environment (os.environ
by default) with `read_fields`, lets keyword overrides (the command-line flags)
win, and checks every value's bounds; `validate()` also checks the locations
and files, at start-up. Every unusable setting raises the one `ConfigError`.

The naming scheme: a setting every server reads alike is `SCROLLBACK_<FIELD>`
(`SCROLLBACK_TRANSCRIPTS`, `SCROLLBACK_STATE`, `SCROLLBACK_DATABASE_URL`,
`SCROLLBACK_MAX_LINE_SIZE`, the security settings of scrollback.server.auth);
one server's own is `SCROLLBACK_<SERVICE>_<FIELD>` (`SCROLLBACK_MEDIA_CHUNK_SIZE`,
`SCROLLBACK_HISTORY_STALL_TIMEOUT_SECONDS`), the flag `--<field>` with dashes.
A few older names still work as deprecated aliases (a warning is logged).

`default_state_dir` is the state dir when SCROLLBACK_STATE is unset:
`$XDG_STATE_HOME/scrollback`, else `~/.local/state/scrollback`. It does not
depend on the working directory, so `scrollback up`, `scrollback gc` and the
services started from anywhere share one state. `transcripts_from_env` is the
transcripts root (SCROLLBACK_TRANSCRIPTS, default `~/.claude/projects`), parsed
once into a directory `Path` or a `BucketLocation` (`location_setting`).

`open_database_pool` opens the PostgreSQL pool a `database_url` selects
(psycopg is imported only then). `AuthConfigError` (and an unusable
`SCROLLBACK_DATABASE_URL`) become `ConfigError`, with the same texts for every
server. Errors never show the URL. `open_line_index` opens the
persisted line index (scrollback.lineindex) on the same store.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrollback.lineindex import LineIndex
from scrollback.server.auth import AuthConfigError, SecuritySettings
from scrollback.state.urls import DATABASE_URL_ENV, is_postgres_url

if TYPE_CHECKING:
    from scrollback.objects import Bucket, BucketLocation, Location
    from scrollback.state.postgres import Pool
    from scrollback.transcripts import TranscriptSource

log = logging.getLogger(__name__)

TRANSCRIPTS_ENV = "SCROLLBACK_TRANSCRIPTS"
CODEX_SESSIONS_ENV = "SCROLLBACK_CODEX_SESSIONS"
DEFAULT_CODEX_SESSIONS = "~/.codex/sessions"
OPENCODE_DB_ENV = "SCROLLBACK_OPENCODE_DB"
# opencode's database under $XDG_DATA_HOME (its default when that is not set).
OPENCODE_DB_NAME = "opencode/opencode.db"
DEFAULT_OPENCODE_DB = "~/.local/share/" + OPENCODE_DB_NAME
GEMINI_HOME_ENV = "SCROLLBACK_GEMINI_HOME"
DEFAULT_GEMINI_HOME = "~/.gemini"
STATE_ENV = "SCROLLBACK_STATE"
DEFAULT_TRANSCRIPTS = "~/.claude/projects"
DEFAULT_STATE_TEXT = "$XDG_STATE_HOME/scrollback or ~/.local/state/scrollback"
# How long a stream may wait for its client to grant flow-control window before it is ended
# (scrollback.server.interceptors.stream_guard `_StallWatch`).
DEFAULT_STALL_TIMEOUT_SECONDS = 60.0
# Recently read blocks of transcripts in a bucket kept per process (scrollback.objects.BlockCache).
DEFAULT_BUCKET_CACHE_BYTES = 64 * 1024 * 1024
ENV_PREFIX = "SCROLLBACK_"


class ConfigError(ValueError):
    """A setting a server cannot start on (every server raises this one class)."""


def env_name(field: str, service: str = "") -> str:
    """`SCROLLBACK_<FIELD>` for a shared setting, `SCROLLBACK_<SERVICE>_<FIELD>` for one server's."""
    return ENV_PREFIX + (f"{service.upper()}_" if service else "") + field.upper()


def flag_name(field: str) -> str:
    """The flag of a field: `--<field>` with dashes."""
    return "--" + field.replace("_", "-")


def _parse(kind: str, name: str, text: str) -> Any:
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name} must be an integer") from None
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{name} must be a number") from None
    if kind in ("Path", "Path | None"):
        return Path(text).expanduser()
    return text


_READABLE = frozenset({"int", "float", "str", "Path", "Path | None"})


def read_fields(
    cls: type[Any],
    env: Mapping[str, str],
    *,
    service: str,
    shared: frozenset[str] = frozenset(),
    names: Mapping[str, str] | None = None,
    aliases: Mapping[str, str] | None = None,
    skip: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The fields of the dataclass `cls` that `env` sets, parsed by their annotated type.

    A field's variable is `names[field]` if given, else `env_name(field)` when
    it is in `shared`, else `env_name(field, service)`. Fields of other types
    (bool, nested settings) and those in `skip` are left to the caller. An
    empty variable counts as unset. `aliases` maps a variable to its deprecated
    older name, read (with a warning) when the new one is unset.
    """
    names = names or {}
    aliases = aliases or {}
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        kind = str(field.type)
        if field.name in skip or kind not in _READABLE:
            continue
        name = names.get(field.name, env_name(field.name, "" if field.name in shared else service))
        text = env.get(name, "")
        old = aliases.get(name)
        if not text and old and env.get(old, ""):
            log.warning("%s is deprecated; use %s", old, name)
            name, text = old, env[old]
        if text:
            values[field.name] = _parse(kind, name, text)
    return values


def with_overrides(values: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with the overrides that are set (None: the flag was not given)."""
    return {**values, **{k: v for k, v in overrides.items() if v is not None}}


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """The state dir when SCROLLBACK_STATE is unset (XDG base directory rules)."""
    source = os.environ if env is None else env
    xdg = source.get("XDG_STATE_HOME", "")
    # The XDG spec ignores a relative XDG_STATE_HOME: it would depend on the cwd.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "scrollback"
    return Path("~/.local/state/scrollback").expanduser()


def state_dir_from_env(env: Mapping[str, str] | None = None) -> Path:
    """SCROLLBACK_STATE (~ expanded), else `default_state_dir`."""
    source = os.environ if env is None else env
    text = source.get(STATE_ENV, "")
    return Path(text).expanduser() if text else default_state_dir(source)


def location_setting(value: str | Path | BucketLocation) -> Location:
    """A transcripts location parsed once (scrollback.objects.parse_location); ConfigError if bad."""
    from scrollback.objects import BucketConfigError, parse_location

    try:
        return parse_location(value)
    except BucketConfigError as error:
        raise ConfigError(str(error)) from None


def transcripts_from_env(env: Mapping[str, str] | None = None) -> Location:
    """SCROLLBACK_TRANSCRIPTS (a directory, ~ expanded, or a bucket), else `~/.claude/projects`."""
    source = os.environ if env is None else env
    return location_setting(source.get(TRANSCRIPTS_ENV, "") or DEFAULT_TRANSCRIPTS)


def codex_sessions_from_env(env: Mapping[str, str] | None = None) -> Location | None:
    """SCROLLBACK_CODEX_SESSIONS (a directory or a bucket), else `~/.codex/sessions` when it
    exists, else None.

    The second root (Codex CLI rollouts); its sibling `archived_sessions` is read too.
    """
    source = os.environ if env is None else env
    text = source.get(CODEX_SESSIONS_ENV, "")
    if text:
        return location_setting(text)
    default = Path(DEFAULT_CODEX_SESSIONS).expanduser()
    return default if default.is_dir() else None


def opencode_db_from_env(env: Mapping[str, str] | None = None) -> Path | None:
    """SCROLLBACK_OPENCODE_DB (~ expanded), else opencode's database under $XDG_DATA_HOME
    (default `~/.local/share/opencode/opencode.db`) when that file exists, else None."""
    source = os.environ if env is None else env
    text = source.get(OPENCODE_DB_ENV, "")
    if text:
        return Path(text).expanduser()
    data_home = source.get("XDG_DATA_HOME", "")
    default = (
        Path(data_home) / OPENCODE_DB_NAME if data_home else Path(DEFAULT_OPENCODE_DB).expanduser()
    )
    return default if default.is_file() else None


def gemini_home_from_env(env: Mapping[str, str] | None = None) -> Path | None:
    """SCROLLBACK_GEMINI_HOME (a directory, ~ expanded), else `~/.gemini` when it exists,
    else None: Gemini CLI's home, whose `tmp/<project>/chats/` hold its sessions."""
    source = os.environ if env is None else env
    text = source.get(GEMINI_HOME_ENV, "")
    if text:
        return Path(text).expanduser()
    default = Path(DEFAULT_GEMINI_HOME).expanduser()
    return default if default.is_dir() else None


def gemini_home_setting(value: Path | str | None) -> Path | None:
    """A Gemini home given as text or a path (~ expanded); it must be a local directory."""
    if value is None:
        return None
    text = str(value)
    if "://" in text:
        raise ConfigError(f"Gemini's home ({GEMINI_HOME_ENV}) must be a local directory")
    return Path(text).expanduser()


@contextmanager
def auth_errors_as_config_errors() -> Iterator[None]:
    """Re-raise an AuthConfigError of the block as ConfigError (same text)."""
    try:
        yield
    except AuthConfigError as error:
        raise ConfigError(str(error)) from None


def security_from_env(
    env: Mapping[str, str], *, service: str, auth_tokens: Path | None = None
) -> SecuritySettings:
    """The security settings of the environment (metrics: `SCROLLBACK_<SERVICE>_METRICS_ADDR`).

    `auth_tokens` (the `--auth-tokens` flag) wins over SCROLLBACK_AUTH_TOKENS.
    """
    with auth_errors_as_config_errors():
        security = SecuritySettings.from_env(env, metrics_var=env_name("metrics_addr", service))
    if auth_tokens is not None:
        security = dataclasses.replace(security, auth_tokens=auth_tokens.expanduser())
    return security


def check_database_url(database_url: str) -> None:
    """The database URL must be empty (SQLite) or postgresql://; never shown."""
    if database_url and not is_postgres_url(database_url):
        raise ConfigError(f"{DATABASE_URL_ENV} must be a postgresql:// URL")


def check_security(security: SecuritySettings) -> None:
    """The security settings must be usable (their files are checked now)."""
    with auth_errors_as_config_errors():
        security.validate()


def open_database_pool(url: str, *, name: str) -> Pool:
    """A pool on the migrated database (blocking); ConfigError if unreachable."""
    from scrollback.state.postgres import DatabaseUnavailableError, open_pool

    try:
        return open_pool(url, name=name)
    except DatabaseUnavailableError as error:
        raise ConfigError(str(error)) from None


def check_locations(transcripts: Location, state_dir: Path, codex: Location | None = None) -> None:
    """The transcripts root must be a directory or a bucket; the state dir one or not yet there.

    Codex's sessions may be in a bucket only when the transcripts root is (the
    bucket itself is checked when the server opens it, `Buckets`).
    """
    if isinstance(transcripts, Path) and codex is not None and not isinstance(codex, Path):
        raise ConfigError(
            f"Codex's sessions ({CODEX_SESSIONS_ENV}) can be in a bucket only when the "
            f"transcripts root ({TRANSCRIPTS_ENV}) is"
        )
    if isinstance(transcripts, Path) and not transcripts.is_dir():
        raise ConfigError(f"the transcripts root ({TRANSCRIPTS_ENV}) is not a directory")
    if state_dir.exists() and not state_dir.is_dir():
        raise ConfigError(f"the state dir ({STATE_ENV}) is not a directory")


class Buckets:
    """The bucket clients of one server process, one per location, checked when first made.

    Every transcripts root of the process gets its bucket here, so they share
    its block cache (`cache_bytes`). A bucket that is missing, refuses the
    credentials or cannot be reached is a ConfigError (blocking: it asks the store).
    """

    def __init__(self, cache_bytes: int = DEFAULT_BUCKET_CACHE_BYTES) -> None:
        self.cache_bytes = cache_bytes
        self._made: dict[BucketLocation, Bucket] = {}

    def __call__(self, location: BucketLocation) -> Bucket:
        from scrollback.objects import Bucket, BucketConfigError

        made = self._made.get(location)
        if made is None:
            made = Bucket(location, cache_bytes=self.cache_bytes)
            try:
                made.check()
            except BucketConfigError as error:
                raise ConfigError(str(error)) from None
            self._made[location] = made
        return made


def open_transcript_source(
    transcripts: Location,
    buckets: Buckets,
    *,
    rescan_interval: float = 2.0,
    report_skipped: bool = False,
    codex: Location | None = None,
    opencode: Path | None = None,
    gemini: Path | None = None,
) -> TranscriptSource:
    """The transcript source a location names, a directory or a bucket (blocking for a bucket),
    served beside opencode's database when one is given (scrollback.opencode.combined).

    A local Codex sessions dir beside a bucket root is not read (it is logged):
    the default `~/.codex/sessions` of the host is not the bucket's.
    """
    from scrollback.bucket import transcript_source

    if not isinstance(transcripts, Path) and isinstance(codex, Path):
        log.warning(
            "the transcripts root is a bucket: the local Codex sessions dir is not read "
            "(set %s to an s3:// URL to read Codex's sessions from a bucket)",
            CODEX_SESSIONS_ENV,
        )
        codex = None
    if not isinstance(transcripts, Path) and gemini is not None:
        log.warning(
            "the transcripts root is a bucket: Gemini's home is not read (%s names a local "
            "directory, read beside a local transcripts root only)",
            GEMINI_HOME_ENV,
        )
        gemini = None
    files = transcript_source(
        transcripts,
        buckets=buckets,
        rescan_interval=rescan_interval,
        report_skipped=report_skipped,
        codex=codex,
        gemini=gemini,
    )
    if opencode is None:
        return files
    from scrollback.contract.refs import CLAUDE_CODE, CODEX, GEMINI, OPENCODE
    from scrollback.opencode.combined import CombinedSource
    from scrollback.opencode.source import OpencodeSource

    database = OpencodeSource(opencode, rescan_interval=rescan_interval)
    return CombinedSource(
        [(frozenset({CLAUDE_CODE, CODEX, GEMINI}), files), (frozenset({OPENCODE}), database)]
    )


def open_line_index(
    state_dir: Path,
    database_url: str,
) -> LineIndex:
    """The persisted line index on the configured state store (blocking; closed by the caller)."""
    if not database_url:
        from scrollback.state.line_index_sqlite import SqliteLineIndexStore

        return LineIndex(SqliteLineIndexStore(state_dir))
    from scrollback.state.line_index_postgres import PostgresLineIndexStore

    pool = open_database_pool(database_url, name="lineindex")
    return LineIndex(PostgresLineIndexStore(pool))


def read_server_values(
    cls: type[Any],
    env: Mapping[str, str],
    *,
    service: str,
    shared: frozenset[str],
    aliases: Mapping[str, str],
    auth_tokens: Path | None,
) -> dict[str, Any]:
    """A gRPC service's settings from `env`: its fields (`read_fields`), plus the transcripts
    root, the state dir and the security settings every service reads alike."""
    values = read_fields(
        cls,
        env,
        service=service,
        shared=shared,
        aliases=aliases,
        skip=frozenset(
            {"transcripts", "state_dir", "codex_sessions", "opencode_db", "gemini_home"}
        ),
    )
    values["transcripts"] = transcripts_from_env(env)
    values["codex_sessions"] = codex_sessions_from_env(env)
    values["opencode_db"] = opencode_db_from_env(env)
    values["gemini_home"] = gemini_home_from_env(env)
    values["state_dir"] = state_dir_from_env(env)
    values["security"] = security_from_env(env, service=service, auth_tokens=auth_tokens)
    return values
