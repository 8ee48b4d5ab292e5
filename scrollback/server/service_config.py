"""Configuration rules both services share: security settings and the database URL.

`open_database_pool` opens the PostgreSQL pool a `database_url` selects
(psycopg is imported only then).

Each service raises its own `ConfigError`; these helpers take that class and
turn `AuthConfigError` (and an unusable `SCROLLBACK_DATABASE_URL`) into it,
with the same texts for both services. Errors never show the URL.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from scrollback.server.auth import AuthConfigError, SecuritySettings
from scrollback.state.urls import DATABASE_URL_ENV, is_postgres_url

if TYPE_CHECKING:
    from scrollback.state.postgres import Pool


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
