"""docker-compose.yml: its structure, then each service run locally exactly as compose would.

No Docker engine runs here, so the test reads the compose file with PyYAML,
checks what a deployment relies on (two services from one build, transcripts
mounted read-only, one named state volume shared, healthchecks through
`python -m scrollback.server.healthcheck`, the environment of CONTRACT section 6),
then starts each service as a subprocess with the compose file's own
`command` and `environment`, rewriting only the /transcripts and /state paths
(to tmp dirs) and the ports (to free ones). It waits for the compose
healthcheck command to pass and drives the services only through their ports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from client import HistoryClient, MediaClient
from tests.support.servers import free_port, png, user_line

REPO = Path(__file__).resolve().parents[3]
CONTAINER_PORTS = {"history": 50051, "media": 50052}
ADDR_ENV = {"history": "SCROLLBACK_HISTORY_ADDR", "media": "SCROLLBACK_MEDIA_ADDR"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The parsed docker-compose.yml, the two gRPC services of the default set (profiled
    ones start only on request; the `scaled` profile is tested in tests/integration/stores;
    the gateway, a client of these two, is checked by test_compose_gateway)."""
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    data["services"] = {
        k: v for k, v in data["services"].items() if not v.get("profiles") and k != "gateway"
    }
    return data


def test_compose_gateway() -> None:
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    gateway = data["services"]["gateway"]
    assert gateway["build"] == data["services"]["history"]["build"]
    assert gateway["command"][:3] == ["python", "-m", "gateway"]
    assert "0.0.0.0:8080" in gateway["command"]
    assert gateway["ports"] == ["127.0.0.1:8080:8080"], "publish on loopback only"
    environment = gateway["environment"]
    assert environment["SCROLLBACK_HISTORY_ADDR"] == "history:50051"
    assert environment["SCROLLBACK_MEDIA_ADDR"] == "media:50052"


def _volume(spec: str) -> tuple[str, str, str]:
    parts = spec.rsplit(":", 2)
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        return parts[0], parts[1], parts[2]
    source, _, target = spec.rpartition(":")
    return source, target, "rw"


def test_compose_structure(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"history", "media"}
    assert services["history"]["build"] == services["media"]["build"] == "."
    assert (REPO / "Dockerfile").is_file()
    named = set(compose.get("volumes") or {})
    for name, service in services.items():
        port = CONTAINER_PORTS[name]
        volumes = [_volume(v) for v in service["volumes"]]
        transcripts = [v for v in volumes if v[1] == "/transcripts"]
        assert len(transcripts) == 1 and transcripts[0][2] == "ro", "transcripts must be :ro"
        state = [v for v in volumes if v[1] == "/state"]
        assert len(state) == 1 and state[0][0] in named, "state must be the named volume"
        environment = service["environment"]
        assert environment["SCROLLBACK_TRANSCRIPTS"] == "/transcripts"
        assert environment["SCROLLBACK_STATE"] == "/state"
        assert environment[ADDR_ENV[name]].endswith(f":{port}")
        command = service["command"]
        assert command[:3] == ["python", "-m", f"{name}_service"]
        assert f"0.0.0.0:{port}" in command and "--insecure" in command
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"], "publish on loopback only"
        check = service["healthcheck"]["test"]
        assert check[:4] == ["CMD", "python", "-m", "scrollback.server.healthcheck"]
        assert check[4] == f"127.0.0.1:{port}"
    assert _volume(services["history"]["volumes"][1]) == _volume(services["media"]["volumes"][1])


def _rewrite(value: str, paths: dict[str, str], port: int, new_port: int) -> str:
    for old, new in paths.items():
        if value == old or value.startswith(old + "/"):
            value = new + value[len(old) :]
    return value.replace(f":{port}", f":{new_port}")


@pytest.fixture
def composed(compose: dict[str, Any], tmp_path: Path) -> Iterator[dict[str, int]]:
    """Both services started from the compose file; yields their local ports."""
    root, state = tmp_path / "transcripts", tmp_path / "state"
    (root / "proj").mkdir(parents=True)
    state.mkdir()
    (root / "proj" / "d1.jsonl").write_bytes(
        user_line("e1", "hello from compose", images=(png(7),))
    )
    paths = {"/transcripts": str(root), "/state": str(state)}
    processes: list[subprocess.Popen[bytes]] = []
    ports: dict[str, int] = {}
    try:
        for name, service in compose["services"].items():
            port, new_port = CONTAINER_PORTS[name], free_port()
            ports[name] = new_port
            env = dict(os.environ)
            env.update(
                {
                    k: _rewrite(str(v), paths, port, new_port)
                    for k, v in service["environment"].items()
                }
            )
            command = [_rewrite(str(part), paths, port, new_port) for part in service["command"]]
            assert command[0] == "python"
            processes.append(
                subprocess.Popen(
                    [sys.executable, *command[1:]],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
            check = [
                _rewrite(str(p), paths, port, new_port) for p in service["healthcheck"]["test"]
            ]
            probe = [sys.executable, *check[2:]]
            deadline = time.monotonic() + 20
            while subprocess.run(probe, cwd=REPO, env=env, timeout=15).returncode != 0:
                assert processes[-1].poll() is None, (
                    processes[-1].stderr and processes[-1].stderr.read()
                )
                assert time.monotonic() < deadline, f"{name} never became healthy"
                time.sleep(0.2)
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                assert process.wait(10) == 0, "SIGTERM must stop a service cleanly"
            finally:
                if process.poll() is None:
                    process.kill()


def test_services_run_from_the_compose_file(composed: dict[str, int]) -> None:
    with (
        HistoryClient(f"127.0.0.1:{composed['history']}") as history,
        MediaClient(f"127.0.0.1:{composed['media']}") as media,
    ):
        window = history.read_window("d1")
        (entry,) = window.entries
        assert entry.uuid == "e1" and len(entry.media_refs) == 1
        photo = media.read_media(entry.media_refs[0])
        assert photo.data == png(7) and photo.metadata.content_type == "image/png"
