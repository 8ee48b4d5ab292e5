"""docker-compose.yml, profile `scaled`, in real containers: PostgreSQL and two replicas of each.

The profile is brought up on the private engine (compose_engine.py) with the
PostgreSQL image built offline in place of postgres:16 (the compose file's
SCROLLBACK_POSTGRES_IMAGE); every container must become healthy by the
engine's own healthchecks, the replicas only after PostgreSQL is
(`service_healthy`). From the host: an accept answered by history-1 reaches a
watch already open on history-2, and Bootstrap there shows it pending; a
media reference minted by history-1 is served by media-1 and media-2; the
client balancing over both history replicas uses both and survives stopping
history-1's container, which exits 0.
"""

from __future__ import annotations

import queue
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from client import HistoryClient, MediaClient
from tests.integration.deploy.compose_engine import (
    EMPTY,
    OWNER,
    REPO,
    Engine,
    Project,
    free_ports,
)

# These tests build and run containers: `./scripts/test --quick` leaves them to CI.
pytestmark = pytest.mark.container

REPLICAS = ("history-1", "history-2", "media-1", "media-2")


def test_profile_structure() -> None:
    """The defaults the end-to-end test overrides: the postgres image and the replicas' ports."""
    services: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    scaled = {k for k, v in services.items() if "scaled" in (v.get("profiles") or [])}
    assert scaled == {"postgres", *REPLICAS}
    assert services["postgres"]["image"] == "${SCROLLBACK_POSTGRES_IMAGE:-postgres:16}"
    assert "ports" not in services["postgres"], "the database stays inside the compose network"
    for name, default in zip(REPLICAS, ("50061", "50062", "50071", "50072"), strict=True):
        variable = f"SCROLLBACK_{name.upper().replace('-', '_')}_PORT"
        (port,) = services[name]["ports"]
        assert port.startswith(f"127.0.0.1:${{{variable}:-{default}}}:")


def _variable(service: str) -> str:
    return f"SCROLLBACK_{service.upper().replace('-', '_')}_PORT"


@pytest.fixture(scope="module")
def scaled(engine: Engine, images: dict[str, str], transcripts: Path) -> Iterator[Project]:
    """The profile up and every container healthy; removed with its volumes afterwards."""
    variables = {
        "SCROLLBACK_IMAGE": images["scrollback"],
        "SCROLLBACK_POSTGRES_IMAGE": images["postgres"],
        "SCROLLBACK_USER": f"{OWNER[0]}:{OWNER[1]}",
        "SCROLLBACK_TRANSCRIPTS_HOST": str(transcripts),
        "SCROLLBACK_CODEX_HOST": str(EMPTY),
        "SCROLLBACK_PG_PASSWORD": secrets.token_hex(8),
    } | {_variable(s): str(p) for s, p in zip(REPLICAS, free_ports(4), strict=True)}
    project = Project(engine, f"sbx{secrets.token_hex(4)}", variables)
    try:
        project.compose("--profile", "scaled", "up", "--detach", "--no-build", *REPLICAS)
        project.wait_healthy(["postgres", *REPLICAS])
        yield project
    finally:
        project.compose("--profile", "scaled", "down", "--volumes", "--timeout", "20")


def _addr(project: Project, service: str) -> str:
    return f"127.0.0.1:{project.variables[_variable(service)]}"


def test_accept_on_one_replica_reaches_a_watch_and_bootstrap_on_the_other(
    scaled: Project,
) -> None:
    text = f"across replicas {secrets.token_hex(4)}"
    with (
        HistoryClient(_addr(scaled, "history-1")) as one,
        HistoryClient(_addr(scaled, "history-2")) as two,
    ):
        header = two.bootstrap("small").header
        assert header is not None
        seen: queue.Queue[str] = queue.Queue()
        watch = two.watch("small", header.watch_position)

        def follow() -> None:
            for event in watch:
                if event.accepted is not None:
                    seen.put(event.accepted.text)
                    return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        one.accept_message(text, session_id="small")
        assert seen.get(timeout=30) == text, "the watch on history-2 saw history-1's accept"
        follower.join(10)
        after = two.bootstrap("small").header
        assert after is not None and text in [m.text for m in after.pending]


def test_a_ref_minted_by_history_1_is_served_by_both_media_replicas(scaled: Project) -> None:
    with HistoryClient(_addr(scaled, "history-1")) as history:
        window = history.read_window("two-images", page_size=200)
    refs = [ref for entry in window.entries for ref in entry.media_refs]
    assert refs
    served = []
    for replica in ("media-1", "media-2"):
        with MediaClient(_addr(scaled, replica)) as media:
            served.append([media.read_media(ref).data for ref in refs])
    assert served[0] == served[1] and all(served[0])


def test_client_balances_over_both_history_replicas_and_survives_stopping_one(
    scaled: Project,
) -> None:
    def calls(service: str) -> int:
        return scaled.logs(service).count("method=ListSessions")

    before = {service: calls(service) for service in ("history-1", "history-2")}
    addresses = ",".join(_addr(scaled, s) for s in ("history-1", "history-2"))
    with HistoryClient(addresses) as client:
        for _ in range(20):
            client.list_sessions()
        served = {service: calls(service) - before[service] for service in before}
        assert all(count > 0 for count in served.values()), f"both replicas used: {served}"
        scaled.compose("--profile", "scaled", "stop", "--timeout", "20", "history-1")
        state = scaled.state("history-1")
        assert state["ExitCode"] == 0 and not state["Running"], state
        for _ in range(5):
            client.list_sessions()  # retried on the replica that is left
    assert calls("history-2") >= before["history-2"] + served["history-2"] + 5
