"""Configuration rules both services share: locations, security settings and the database URL.

`default_state_dir` is the state dir when SCROLLBACK_STATE is unset:
`$XDG_STATE_HOME/scrollback`, else `~/.local/state/scrollback`. It does not
depend on the working directory, so `scrollback up`, `scrollback gc` and the
services started from anywhere share one state. `transcripts_from_env` is the
transcripts root (SCROLLBACK_TRANSCRIPTS, default `~/.claude/projects`).

`open_database_pool` opens the PostgreSQL pool a `database_url` selects
(psycopg is imported only then); `open_line_index` the persisted line index
(scrollback.lineindex) on the same store.

Each service raises its own `ConfigError`; these helpers take that class and
turn `AuthConfigError` (and an unusable `SCROLLBACK_DATABASE_URL`) into it,
with the same texts for both services. Errors never show the URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from scrollback.lineindex import LineIndex
from scrollback.server.auth import AuthConfigError, SecuritySettings
from scrollback.state.urls import DATABASE_URL_ENV, is_postgres_url

if TYPE_CHECKING:
    from scrollback.state.postgres import Pool

TRANSCRIPTS_ENV = "SCROLLBACK_TRANSCRIPTS"
STATE_ENV = "SCROLLBACK_STATE"
DEFAULT_TRANSCRIPTS = "~/.claude/projects"
DEFAULT_STATE_TEXT = "$XDG_STATE_HOME/scrollback or ~/.local/state/scrollback"


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


def transcripts_from_env(env: Mapping[str, str] | None = None) -> Path:
    """SCROLLBACK_TRANSCRIPTS (~ expanded), else `~/.claude/projects`."""
    source = os.environ if env is None else env
    return Path(source.get(TRANSCRIPTS_ENV, "") or DEFAULT_TRANSCRIPTS).expanduser()


@contextmanager
def auth_errors_as(config_error: type[Exception]) -> Iterator[None]:
    """Re-raise an AuthConfigError of the block as `config_error` (same text)."""
    try:
        yield
    except AuthConfigError as error:
        raise config_error(str(error)) from None


def security_from_env(
    env: Mapping[str, str], *, metrics_var: str, config_error: type[Exception]
) -> SecuritySettings:
    """The security settings of the environment; `config_error` when unusable."""
    with auth_errors_as(config_error):
        return SecuritySettings.from_env(env, metrics_var=metrics_var)


def validate_shared(
    database_url: str, security: SecuritySettings, *, config_error: type[Exception]
) -> None:
    """Check the database URL (empty, or postgresql://) and the security settings."""
    if database_url and not is_postgres_url(database_url):
        raise config_error(f"{DATABASE_URL_ENV} must be a postgresql:// URL")
    with auth_errors_as(config_error):
        security.validate()


def open_database_pool(url: str, *, name: str, config_error: type[Exception]) -> Pool:
    """A pool on the migrated database (blocking); `config_error` if unreachable."""
    from scrollback.state.postgres import DatabaseUnavailableError, open_pool

    try:
        return open_pool(url, name=name)
    except DatabaseUnavailableError as error:
        raise config_error(str(error)) from None


def check_locations(transcripts: Path, state_dir: Path, *, config_error: type[Exception]) -> None:
    """The transcripts root must be a directory; the state dir one or not yet there."""
    if not transcripts.is_dir():
        raise config_error(f"the transcripts root ({TRANSCRIPTS_ENV}) is not a directory")
    if state_dir.exists() and not state_dir.is_dir():
        raise config_error(f"the state dir ({STATE_ENV}) is not a directory")


def open_line_index(
    state_dir: Path, database_url: str, *, config_error: type[Exception]
) -> LineIndex:
    """The persisted line index on the configured state store (blocking; closed by the caller)."""
    if not database_url:
        from scrollback.state.line_index_sqlite import SqliteLineIndexStore

        return LineIndex(SqliteLineIndexStore(state_dir))
    from scrollback.state.line_index_postgres import PostgresLineIndexStore

    pool = open_database_pool(database_url, name="lineindex", config_error=config_error)
    return LineIndex(PostgresLineIndexStore(pool))
