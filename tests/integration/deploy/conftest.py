"""Fixtures of the deploy tests.

`deploy_servers`: both services in a background loop (the grpcurl test).
`engine` and `images`: a private Docker engine and the images built offline
(compose_engine.py), shared by the session; `seaweedfs_image`: the s3
profile's SeaweedFS image on the same base, built only when a test asks; `transcripts`: a real transcript
with images from tests/corpus, owned by a non-root user with mode 0600, as a
user's own transcripts are.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.deploy.compose_engine import (
    CORPUS,
    OWNER,
    TRANSCRIPTS,
    Engine,
    build_images,
    build_seaweedfs_image,
)
from tests.support.servers import ServerPair, serving_pair


@pytest.fixture
def deploy_servers(tmp_path: Path) -> Iterator[ServerPair]:
    """History and media servers over tmp_path/root and tmp_path/state."""
    yield from serving_pair(tmp_path)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """The private dockerd, stopped by its PID at the end of the session."""
    running = Engine()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def images(engine: Engine, request: pytest.FixtureRequest) -> dict[str, str]:
    """The Scrollback and PostgreSQL image tags, built with no registry (and the SeaweedFS
    one beside them when a collected test asks for it)."""
    wanted = any(
        "seaweedfs_image" in getattr(item, "fixturenames", ()) for item in request.session.items
    )
    return build_images(engine, seaweedfs=wanted)


@pytest.fixture(scope="session")
def seaweedfs_image(engine: Engine, images: dict[str, str]) -> str:
    """The SeaweedFS image's tag, built with no registry on the others' base."""
    return images.get("seaweedfs") or build_seaweedfs_image(engine, images["base"])


@pytest.fixture(scope="session")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A transcripts root holding the corpus files, each 0600 and owned by OWNER."""
    root = tmp_path_factory.mktemp("transcripts")
    project = root / "proj"
    project.mkdir()
    for session, name in TRANSCRIPTS.items():
        shutil.copyfile(CORPUS / name, project / f"{session}.jsonl")
    for path in (root, project, *project.iterdir()):
        os.chown(path, *OWNER)
        path.chmod(0o700 if path.is_dir() else 0o600)
    return root
