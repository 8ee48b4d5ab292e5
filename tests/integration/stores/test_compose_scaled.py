"""docker-compose.yml, profile `scaled`: PostgreSQL plus two replicas of each service.

No Docker engine runs here, so the structure is checked with PyYAML: the
profile's postgres service (postgres:16, pg_isready healthcheck), history-1/2
and media-1/2 running the default services' own command with
SCROLLBACK_DATABASE_URL pointing at it, waiting for it to be healthy, sharing
one state volume (token key and blob bytes), each published on its own
loopback port; and the default services untouched by the profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
REPLICAS = {"history-1": "history", "history-2": "history", "media-1": "media", "media-2": "media"}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    assert {"state", "scaled-state", "pgdata"} <= set(data["volumes"])
    found = data["services"]
    assert isinstance(found, dict)
    return found


def test_default_services_have_no_profile_and_no_database(services: dict[str, Any]) -> None:
    for name in ("history", "media"):
        assert "profiles" not in services[name]
        assert "SCROLLBACK_DATABASE_URL" not in services[name]["environment"]
    scaled = {k for k, v in services.items() if "scaled" in (v.get("profiles") or [])}
    assert scaled == {"postgres", *REPLICAS}


def test_postgres_service(services: dict[str, Any]) -> None:
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16"
    check = " ".join(postgres["healthcheck"]["test"])
    assert "pg_isready" in check
    assert "ports" not in postgres, "the database is reachable only inside the compose network"
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])


def test_replicas_share_the_database_and_the_state_volume(services: dict[str, Any]) -> None:
    host_ports: set[str] = set()
    states: set[str] = set()
    urls: set[str] = set()
    for name, base in REPLICAS.items():
        replica, default = services[name], services[base]
        assert replica["command"] == default["command"], "the same command as the default"
        assert replica["build"] == default["build"]
        environment = replica["environment"]
        assert environment["SCROLLBACK_DATABASE_URL"].startswith("postgresql://")
        assert "@postgres:5432/" in environment["SCROLLBACK_DATABASE_URL"]
        urls.add(environment["SCROLLBACK_DATABASE_URL"])
        for key, value in default["environment"].items():
            assert environment[key] == value
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        volumes = replica["volumes"]
        assert any(v.endswith(":/transcripts:ro") for v in volumes)
        (state,) = [v for v in volumes if v.endswith(":/state")]
        states.add(state)
        assert replica["healthcheck"]["test"] == default["healthcheck"]["test"]
        (port,) = replica["ports"]
        assert port.startswith("127.0.0.1:"), "publish on loopback only"
        host_ports.add(port.split(":")[1])
    assert len(host_ports) == 4, "each replica has its own host port"
    assert states == {"scaled-state:/state"}, "one state volume shared by every replica"
    assert len(urls) == 1
