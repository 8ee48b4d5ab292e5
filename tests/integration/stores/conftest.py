"""Fixtures of the store tests: a throwaway PostgreSQL database per run (or per test).

The server is `SCROLLBACK_TEST_POSTGRES_URL` (default
`postgresql://postgres@127.0.0.1:5432/test`, used only to create and drop
databases named `scrollback_test_<random>`). Without a reachable server the
PostgreSQL tests skip with one line; under CI=true they fail instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

ADMIN_URL = os.environ.get(
    "SCROLLBACK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
TABLES = (
    "blob_ref",
    "blob_owner",
    "chat_binding",
    "accepted_message",
    "blob",
    "insight_file",
    "insight_entry_type",
    "insight_message",
    "insight_model",
    "insight_subagent_link",
    "line_index_line",
    "line_index_file",
)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        message = (
            "PostgreSQL not reachable (SCROLLBACK_TEST_POSTGRES_URL): PostgreSQL tests skipped"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message.replace("skipped", "required under CI=true"))
        pytest.skip(message)


@pytest.fixture(scope="session")
def make_database() -> Iterator[Callable[[], str]]:
    """A factory of fresh, empty databases (URLs); every one is dropped at the end."""
    created: list[str] = []

    def make() -> str:
        with _admin() as admin:
            name = f"scrollback_test_{secrets.token_hex(6)}"
            admin.execute(f"CREATE DATABASE {name}")
        created.append(name)
        return _with_database(ADMIN_URL, name)

    yield make
    if created:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as admin:
            for name in created:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def shared_pg_url(make_database: Callable[[], str]) -> str:
    """One database for the whole run (emptied by `pg_url` before each test)."""
    return make_database()


@pytest.fixture
def pg_url(shared_pg_url: str) -> str:
    """The run's database, emptied (tables truncated, sequences restarted)."""
    with psycopg.connect(shared_pg_url, autocommit=True) as connection:
        exists = connection.execute("SELECT to_regclass('public.blob') IS NOT NULL").fetchone()
        if exists and exists[0]:
            connection.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY")
    return shared_pg_url
