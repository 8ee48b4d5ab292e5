"""`./scripts/compose` and the compose file's mounts, without an engine.

The wrapper picks `docker compose` (v2) or `docker-compose` (v1), whichever answers, and
runs it with the user's uid and their Claude Code and Codex directories mounted read-only.
Here `docker` and `docker-compose` are small scripts on PATH that record how they were
called (no engine runs in the unit tests; tests/integration/deploy runs compose for real).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RECORD = (
    'echo "$0 $*|$SCROLLBACK_USER|$SCROLLBACK_CODEX_HOST|$SCROLLBACK_TRANSCRIPTS_HOST" >> "$LOG"'
)


def _tools(tmp_path: Path, *, v2: bool, v1: bool) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    answer = RECORD if v2 else 'echo "docker: unknown command: docker compose" >&2; exit 1'
    docker.write_text(f'#!/bin/sh\nif [ "$1" = compose ]; then\n{answer}\nfi\n')
    if v1:
        (bin_dir / "docker-compose").write_text(f"#!/bin/sh\n{RECORD}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def _system(tmp_path: Path) -> Path:
    """A dir of the few system tools the wrapper runs, so that a compose installed on this
    machine (/usr/bin/docker-compose on a CI machine) is not on the wrapper's PATH."""
    system = tmp_path / "system"
    system.mkdir(exist_ok=True)
    for tool in ("bash", "sh", "id", "dirname", "tail", "cat"):
        found = shutil.which(tool)
        assert found is not None, tool
        if not (system / tool).exists():
            (system / tool).symlink_to(found)
    return system


def _run(tmp_path: Path, home: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    path = f"{bin_dir}:{_system(tmp_path)}"
    env = {"PATH": path, "HOME": str(home), "LOG": str(tmp_path / "log")}
    return subprocess.run([str(ROOT / "scripts" / "compose"), "up", "-d"], env=env,
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip


def _calls(tmp_path: Path) -> list[list[str]]:
    return [line.split("|") for line in (tmp_path / "log").read_text().splitlines()]


def test_v2_is_used_when_docker_has_compose(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".claude" / "projects").mkdir(parents=True)
    result = _run(tmp_path, home, _tools(tmp_path, v2=True, v1=True))
    assert result.returncode == 0, result.stderr
    (version, up) = _calls(tmp_path)
    assert version[0].endswith("docker compose version") and up[0].endswith("docker compose up -d")
    assert up[1] == f"{os.getuid()}:{os.getgid()}"
    assert up[2] == str(home / ".codex") and up[3] == str(home / ".claude" / "projects")


def test_v1_is_used_without_v2_and_absent_homes_are_never_created(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = _run(tmp_path, home, _tools(tmp_path, v2=False, v1=True))
    assert result.returncode == 0, result.stderr
    ((command, _, codex, transcripts),) = _calls(tmp_path)
    assert command.endswith("docker-compose up -d")
    assert codex == transcripts == str(ROOT / "deploy" / "empty")


def test_neither_compose_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = _run(tmp_path, tmp_path, _tools(tmp_path, v2=False, v1=False))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


def test_the_services_mount_codex_read_only_beside_claude_code() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("history", "media", "history-1", "media-2"):
        service = compose["services"][name]
        assert "${SCROLLBACK_CODEX_HOST:-~/.codex}:/codex:ro" in service["volumes"], name
        assert service["environment"]["SCROLLBACK_CODEX_SESSIONS"] == "/codex/sessions", name
