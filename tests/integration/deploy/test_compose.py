"""docker-compose.yml's default pair, in real containers on a real engine.

The images are built offline and the project brought up with Debian's
docker-compose on a private dockerd (compose_engine.py, conftest.py); the
host ports are free ones, passed through the compose file's variables, and
the services run as the owner of the mounted transcripts (mode 0600). From
the host: grpcurl list, describe and health on both services; ReadWindow and
ReadMedia byte-exact on real transcripts (compared with the same code run in
this process); `scrollback send` then Bootstrap shows the message pending;
both containers exit 0 on stop; the message survives `down` and `up`.
Without an engine the tests skip with the reason (fail under CI=true).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from client import HistoryClient, MediaClient
from tests.integration.deploy.compose_engine import (
    EMPTY,
    OWNER,
    REPO,
    TRANSCRIPTS,
    Engine,
    Project,
    free_ports,
)
from tests.integration.deploy.test_grpcurl import grpcurl
from tests.support.servers import ServerPair

# These tests build and run containers: `./scripts/test --quick` leaves them to CI.
pytestmark = pytest.mark.container

CONTAINER_PORTS = {"history": 50051, "media": 50052}
SERVICES = {
    "history": "scrollback.history.v1.HistoryService",
    "media": "scrollback.media.v1.MediaService",
}


def _volume(spec: str) -> tuple[str, str, str]:
    parts = spec.rsplit(":", 2)
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        return parts[0], parts[1], parts[2]
    source, _, target = spec.rpartition(":")
    return source, target, "rw"


def test_compose_structure() -> None:
    """What the end-to-end tests cannot see: the defaults a plain `docker compose up` gets."""
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = {k: v for k, v in data["services"].items() if not v.get("profiles")}
    assert set(services) == {"history", "media", "gateway"}
    gateway = services.pop("gateway")
    assert gateway["image"] == services["history"]["image"], "one image for all"
    assert gateway["command"][:3] == ["python", "-m", "gateway"]
    assert gateway["volumes"] == [], "the gateway reads no files"
    assert gateway["ports"] == ["127.0.0.1:${SCROLLBACK_GATEWAY_PORT:-8080}:8080"]
    assert gateway["environment"]["SCROLLBACK_HISTORY_ADDR"] == "history:50051"
    assert gateway["environment"]["SCROLLBACK_MEDIA_ADDR"] == "media:50052"
    for name, service in services.items():
        port = CONTAINER_PORTS[name]
        assert service["image"] == "${SCROLLBACK_IMAGE:-scrollback:latest}", "one image for all"
        assert service["build"]["context"] == "."
        assert service["build"]["args"]["PYTHON_IMAGE"].endswith(":-python:3.11-slim}")
        transcripts, codex, state = (_volume(v) for v in service["volumes"])
        assert transcripts[1:] == ("/transcripts", "ro")
        assert codex[1:] == ("/codex", "ro")
        assert state == ("state", "/state", "rw")
        variable = f"SCROLLBACK_{name.upper()}_PORT"
        assert service["ports"] == [f"127.0.0.1:${{{variable}:-{port}}}:{port}"], "loopback only"
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in (REPO / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def pair(engine: Engine, images: dict[str, str], transcripts: Path) -> Iterator[Project]:
    """The default services up and healthy; removed with their volumes afterwards."""
    history_port, media_port, gateway_port = free_ports(3)
    project = Project(
        engine,
        f"sbx{secrets.token_hex(4)}",
        {
            "SCROLLBACK_IMAGE": images["scrollback"],
            "SCROLLBACK_USER": f"{OWNER[0]}:{OWNER[1]}",
            "SCROLLBACK_TRANSCRIPTS_HOST": str(transcripts),
            "SCROLLBACK_CODEX_HOST": str(EMPTY),
            "SCROLLBACK_HISTORY_PORT": str(history_port),
            "SCROLLBACK_MEDIA_PORT": str(media_port),
            "SCROLLBACK_GATEWAY_PORT": str(gateway_port),
        },
    )
    try:
        project.compose("up", "--detach", "--no-build")
        project.wait_healthy(["history", "media"])
        yield project
    finally:
        project.compose("down", "--volumes", "--remove-orphans", "--timeout", "20")


def _addr(project: Project, service: str) -> str:
    return f"127.0.0.1:{project.variables[f'SCROLLBACK_{service.upper()}_PORT']}"


def test_grpcurl_lists_describes_and_checks_health(pair: Project) -> None:
    for service, name in SERVICES.items():
        address = _addr(pair, service)
        listed = grpcurl(address, "list").split()
        assert name in listed and "grpc.health.v1.Health" in listed
        assert "grpc.reflection.v1alpha.ServerReflection" in listed or any(
            "ServerReflection" in s for s in listed
        )
        assert f"service {name.rsplit('.', 1)[1]} {{" in grpcurl(address, "describe", name)
        for checked in (name, ""):
            health = grpcurl(
                "-d", json.dumps({"service": checked}), address, "grpc.health.v1.Health/Check"
            )
            assert json.loads(health) == {"status": "SERVING"}


def _without_pins(entry: Any) -> bytes:
    copy = type(entry)()
    copy.CopyFrom(entry)
    for ref in copy.media_refs:
        ref.pin = b"" if isinstance(ref.pin, bytes) else ""
    return bytes(copy.SerializeToString(deterministic=True))


def test_read_window_and_media_are_byte_exact(
    pair: Project, transcripts: Path, tmp_path: Path
) -> None:
    """The containers serve the real transcripts exactly as the same code run here does."""
    shutil.copytree(transcripts, tmp_path / "root")
    local = ServerPair(tmp_path / "root", tmp_path / "state")
    try:
        local.start_history(0)
        local.start_media(0)
        with (
            HistoryClient(_addr(pair, "history")) as history,
            MediaClient(_addr(pair, "media")) as media,
            HistoryClient(local.history_addr) as local_history,
            MediaClient(local.media_addr) as local_media,
        ):
            photos = 0
            for session in TRANSCRIPTS:
                window = history.read_window(session, page_size=200)
                expected = local_history.read_window(session, page_size=200)
                assert window.entries, session
                assert [_without_pins(e) for e in window.entries] == [
                    _without_pins(e) for e in expected.entries
                ]
                assert window.file_size_bytes == expected.file_size_bytes
                for entry, local_entry in zip(window.entries, expected.entries, strict=True):
                    for ref, local_ref in zip(
                        entry.media_refs, local_entry.media_refs, strict=True
                    ):
                        photo = media.read_media(ref)
                        assert photo.data == local_media.read_media(local_ref).data
                        assert photo.data and photo.metadata.content_type.startswith("image/")
                        photos += 1
            assert photos >= 2, "the corpus files carry images"
    finally:
        local.close()


def _gateway(project: Project) -> str:
    return f"http://127.0.0.1:{project.variables['SCROLLBACK_GATEWAY_PORT']}"


def _wait_for_gateway(project: Project, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(_gateway(project) + "/api/v1/sessions", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(
                "the gateway container never answered:\n" + project.logs("gateway")
            )
        time.sleep(0.5)


def test_gateway_container_serves_windows_and_photos(pair: Project) -> None:
    """The browser path in containers: the gateway reaches both services by service name."""
    _wait_for_gateway(pair)
    sessions = httpx.get(_gateway(pair) + "/api/v1/sessions", timeout=10).json()["sessions"]
    assert set(TRANSCRIPTS) <= {s["sessionId"] for s in sessions}
    window = httpx.get(_gateway(pair) + "/api/v1/sessions/two-images/window", timeout=10).json()
    refs = [ref for entry in window["entries"] for ref in entry["mediaRefs"]]
    assert refs, "the transcript has photos"
    with (
        HistoryClient(_addr(pair, "history")) as history,
        MediaClient(_addr(pair, "media")) as media,
    ):
        expected = [
            media.read_media(ref).data
            for entry in history.read_window("two-images", page_size=200).entries
            for ref in entry.media_refs
        ]
    photos = [httpx.get(_gateway(pair) + ref["url"], timeout=10) for ref in refs]
    assert [p.status_code for p in photos] == [200] * len(refs)
    assert [p.content for p in photos] == expected
    assert all(p.headers["x-content-type-options"] == "nosniff" for p in photos)


def _bootstrap_pending(project: Project, session: str) -> list[str]:
    with HistoryClient(_addr(project, "history")) as history:
        header = history.bootstrap(session).header
    assert header is not None
    return [message.text for message in header.pending]


def test_send_is_pending_survives_down_and_up_and_containers_exit_0(pair: Project) -> None:
    text = f"hello from the host {secrets.token_hex(4)}"
    scrollback = Path(sys.executable).parent / "scrollback"
    sent = subprocess.run(
        [str(scrollback), "send", "--history-addr", _addr(pair, "history"), "small", text],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    assert text in _bootstrap_pending(pair, "small")

    pair.compose("stop", "--timeout", "20")
    for service in ("history", "media", "gateway"):
        state = pair.state(service)
        assert state["ExitCode"] == 0 and not state["OOMKilled"], f"{service}: {state}"

    pair.compose("down")  # containers gone, the state volume kept
    assert not pair.compose("ps", "--all", "--quiet").split()
    pair.compose("up", "--detach", "--no-build")
    pair.wait_healthy(["history", "media"])
    assert text in _bootstrap_pending(pair, "small")
