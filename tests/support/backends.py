"""The state backend of a test server: SQLite (no override) or a throwaway PostgreSQL database.

`state_backend(name)` yields the config overrides for one backend; for
"postgres" it creates a fresh database on SCROLLBACK_TEST_POSTGRES_URL's
server and drops it afterwards. Without a reachable server the test skips
(fails under CI=true).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

ADMIN_URL = os.environ.get(
    "SCROLLBACK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def state_backend(name: str) -> Iterator[dict[str, Any]]:
    """Config overrides selecting `name` ("sqlite" or "postgres") for the state store."""
    if name == "sqlite":
        yield {}
        return
    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        if os.environ.get("CI") == "true":
            pytest.fail(
                "PostgreSQL not reachable (SCROLLBACK_TEST_POSTGRES_URL): required under CI=true"
            )
        pytest.skip("PostgreSQL not reachable (SCROLLBACK_TEST_POSTGRES_URL): skipped")
    database = f"scrollback_test_{secrets.token_hex(6)}"
    with admin:
        admin.execute(f"CREATE DATABASE {database}")
    parts = urlsplit(ADMIN_URL)
    try:
        yield {"database_url": urlunsplit((parts.scheme, parts.netloc, "/" + database, "", ""))}
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
