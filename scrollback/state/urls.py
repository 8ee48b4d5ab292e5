"""Which state database a configuration names, without importing a database driver.

`SCROLLBACK_DATABASE_URL` (or `--database-url`) set to a `postgresql://` URL
selects PostgreSQL (scrollback.state.postgres, psycopg imported only then);
unset, the services use the embedded SQLite database in the state dir.
"""

from __future__ import annotations

DATABASE_URL_ENV = "SCROLLBACK_DATABASE_URL"
URL_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(url: str) -> bool:
    """Whether a database URL names PostgreSQL."""
    return url.startswith(URL_SCHEMES)
