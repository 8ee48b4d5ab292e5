"""docker-compose.yml, profile `s3`, in real containers: SeaweedFS, the upload step, the pair.

The SeaweedFS image is deploy/seaweedfs built offline on the engine's base
(compose_engine.py); the Scrollback image and the engine are the ones the other
compose tests use. The profile runs with its own credentials and a two-level
prefix, brought up at once: SeaweedFS healthy by the engine's healthcheck, the
one-shot upload exited 0, the pair healthy. The bucket holds every host
transcript (mode 0600, read as their owner) byte for byte, read through S3 on
the published port, which refuses another secret. The pair reads the bucket
through S3 (s3://BUCKET/PREFIX, the AWS variables pointing at SeaweedFS): it
lists the sessions, serves windows and photos byte-exact against the same code
over the same files on a local disk, and the gateway serves a photo. Last, the
upload run again fails on a file it cannot read (copying nothing), and once
that file is gone copies a session that grew.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import obstore
import pytest
import yaml
from obstore.exceptions import BaseError
from obstore.store import S3Store

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
from tests.integration.deploy.test_compose import _without_pins
from tests.support.servers import ServerPair

# These tests build and run containers: `./scripts/test --quick` leaves them to CI.
pytestmark = pytest.mark.container

PROFILE = ("--profile", "s3")
PAIR = ("history-s3", "media-s3")
SERVICES = ("seaweedfs-upload", *PAIR, "gateway-s3")
PREFIX = "team/projects"  # more than one level, as a real prefix may be
PORTS = (
    "SCROLLBACK_S3_PORT",
    *(f"SCROLLBACK_{n}_S3_PORT" for n in ("HISTORY", "MEDIA", "GATEWAY")),
)


def test_profile_structure() -> None:
    """The wiring the end-to-end tests rely on, and the defaults they override."""
    services: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    s3 = {k for k, v in services.items() if "s3" in (v.get("profiles") or [])}
    assert s3 == {"seaweedfs", "seaweedfs-upload", *PAIR, "gateway-s3"}
    seaweedfs = services["seaweedfs"]
    assert seaweedfs["image"] == "${SCROLLBACK_SEAWEEDFS_IMAGE:-scrollback-seaweedfs:latest}"
    assert seaweedfs["build"]["context"] == "deploy/seaweedfs"
    assert seaweedfs["ports"] == ["127.0.0.1:${SCROLLBACK_S3_PORT:-8333}:8333"], "loopback only"
    upload = services["seaweedfs-upload"]
    assert upload["depends_on"] == {"seaweedfs": {"condition": "service_healthy"}}
    assert upload["user"] == "${SCROLLBACK_USER:-10001:10001}", "reads 0600 transcripts"
    credentials = {k: v for k, v in seaweedfs["environment"].items() if k.startswith("AWS_")}
    assert set(credentials) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    for name in PAIR:
        service = services[name]
        environment = service["environment"]
        assert environment["SCROLLBACK_TRANSCRIPTS"] == (
            "s3://${SCROLLBACK_S3_BUCKET:-transcripts}/${SCROLLBACK_S3_PREFIX:-projects}"
        )
        assert environment["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"
        assert credentials.items() <= environment.items(), "the pair signs as SeaweedFS expects"
        assert service["volumes"] == ["s3-state:/state"], "no transcripts mounted"
        assert service["depends_on"] == {
            "seaweedfs-upload": {"condition": "service_completed_successfully"}
        }
    gateway = services["gateway-s3"]["environment"]
    assert (gateway["SCROLLBACK_HISTORY_ADDR"], gateway["SCROLLBACK_MEDIA_ADDR"]) == (
        "history-s3:50051",
        "media-s3:50052",
    )


@pytest.fixture(scope="module")
def host_transcripts(transcripts: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared transcripts (0600, owned by OWNER) this module may change."""
    root = tmp_path_factory.mktemp("s3-transcripts") / "root"
    shutil.copytree(transcripts, root)
    for path in (root, *root.rglob("*")):
        os.chown(path, *OWNER)
    return root


def _exit_code(project: Project, service: str) -> int:
    """The exit code of a service's container, once it has ended (`docker wait`)."""
    return int(project.engine.docker("wait", project.container(service), timeout=90).strip())


def _upload(project: Project) -> int:
    """Run the one-shot upload again to its end; its exit code."""
    project.compose(*PROFILE, "up", "--detach", "--no-build", "seaweedfs-upload")
    return _exit_code(project, "seaweedfs-upload")


@pytest.fixture(scope="module")
def profile(
    engine: Engine, images: dict[str, str], seaweedfs_image: str, host_transcripts: Path
) -> Iterator[Project]:
    """The whole profile up: SeaweedFS, the upload run to exit 0, the pair healthy and the
    gateway; removed with its volumes afterwards."""
    variables = {
        "SCROLLBACK_IMAGE": images["scrollback"],
        "SCROLLBACK_SEAWEEDFS_IMAGE": seaweedfs_image,
        "SCROLLBACK_USER": f"{OWNER[0]}:{OWNER[1]}",
        "SCROLLBACK_TRANSCRIPTS_HOST": str(host_transcripts),
        "SCROLLBACK_CODEX_HOST": str(EMPTY),
        "SCROLLBACK_S3_BUCKET": f"sbx-{secrets.token_hex(3)}",
        "SCROLLBACK_S3_PREFIX": PREFIX,
        "SCROLLBACK_S3_ACCESS_KEY": secrets.token_hex(8),
        "SCROLLBACK_S3_SECRET_KEY": secrets.token_hex(16),
    } | dict(zip(PORTS, map(str, free_ports(len(PORTS))), strict=True))
    project = Project(engine, f"sbx{secrets.token_hex(4)}", variables)
    try:
        # `up` returns once the upload has exited 0 and the pair is healthy: the pair waits
        # for the one, the gateway for the other.
        project.compose(*PROFILE, "up", "--detach", "--no-build", *SERVICES)
        assert _exit_code(project, "seaweedfs-upload") == 0, project.logs("seaweedfs-upload")
        project.wait_healthy(["seaweedfs", *PAIR])
        yield project
    finally:
        project.compose(*PROFILE, "down", "--volumes", "--timeout", "20")


def _store(project: Project, secret: str | None = None) -> S3Store:
    """A client of the bucket through the S3 endpoint the profile publishes on the host."""
    variables = project.variables
    return S3Store(
        variables["SCROLLBACK_S3_BUCKET"],
        endpoint=f"http://127.0.0.1:{variables['SCROLLBACK_S3_PORT']}",
        access_key_id=variables["SCROLLBACK_S3_ACCESS_KEY"],
        secret_access_key=secret or variables["SCROLLBACK_S3_SECRET_KEY"],
        region="us-east-1",
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )


def _bucket_files(project: Project) -> dict[str, str]:
    """Every object under the prefix, read through S3: {key below the prefix: sha256}."""
    store = _store(project)
    keys = [meta["path"] for batch in obstore.list(store, PREFIX + "/") for meta in batch]
    return {
        key.removeprefix(PREFIX + "/"): hashlib.sha256(obstore.get(store, key).bytes()).hexdigest()
        for key in keys
    }


def _host_files(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file()
    }


def test_the_upload_put_the_host_transcripts_in_the_bucket(
    profile: Project, host_transcripts: Path
) -> None:
    expected = _host_files(host_transcripts)
    assert {f"proj/{session}.jsonl" for session in TRANSCRIPTS} == set(expected)
    assert _bucket_files(profile) == expected, "every transcript, byte for byte, under the prefix"
    with pytest.raises(BaseError):  # the one identity only
        obstore.list_with_delimiter(_store(profile, secret="not-the-secret"), PREFIX + "/")


def _addr(project: Project, service: str) -> str:
    variable = f"SCROLLBACK_{service.removesuffix('-s3').upper()}_S3_PORT"
    return f"127.0.0.1:{project.variables[variable]}"


def test_the_pair_serves_sessions_windows_and_photos_from_the_bucket(
    profile: Project, host_transcripts: Path, tmp_path: Path
) -> None:
    """Through S3 exactly what the same code serves from the same files on a local disk."""
    shutil.copytree(host_transcripts, tmp_path / "root")
    local = ServerPair(tmp_path / "root", tmp_path / "state")
    try:
        local.start_history(0)
        local.start_media(0)
        with (
            HistoryClient(_addr(profile, "history-s3")) as history,
            MediaClient(_addr(profile, "media-s3")) as media,
            HistoryClient(local.history_addr) as local_history,
            MediaClient(local.media_addr) as local_media,
        ):
            listed = {s.session_id for s in history.list_sessions().sessions}
            assert listed == {s.session_id for s in local_history.list_sessions().sessions}
            assert set(TRANSCRIPTS) <= listed
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
                        photo = media.read_media(ref).data
                        assert photo and photo == local_media.read_media(local_ref).data
                        photos += 1
            assert photos >= 2, "the corpus files carry images"
    finally:
        local.close()


def test_the_gateway_serves_a_photo_from_the_bucket(profile: Project) -> None:
    gateway = f"http://127.0.0.1:{profile.variables['SCROLLBACK_GATEWAY_S3_PORT']}"
    deadline = time.monotonic() + 60
    while True:
        try:
            window = httpx.get(f"{gateway}/api/v1/sessions/two-images/window", timeout=10)
            if window.status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the gateway never answered:\n" + profile.logs("gateway-s3"))
        time.sleep(0.5)
    refs = [ref for entry in window.json()["entries"] for ref in entry["mediaRefs"]]
    assert refs, "the transcript has photos"
    with (
        MediaClient(_addr(profile, "media-s3")) as media,
        HistoryClient(_addr(profile, "history-s3")) as history,
    ):
        expected = [
            media.read_media(ref).data
            for entry in history.read_window("two-images", page_size=200).entries
            for ref in entry.media_refs
        ]
    photos = [httpx.get(gateway + ref["url"], timeout=10) for ref in refs]
    assert [p.status_code for p in photos] == [200] * len(refs)
    assert [p.content for p in photos] == expected


def test_the_upload_refuses_an_unreadable_file_then_copies_what_grew(
    profile: Project, host_transcripts: Path
) -> None:
    """Run again (as on a later start): a file it cannot read fails it before it copies
    anything; without that file, the session that grew on the host is copied again."""
    before = _bucket_files(profile)
    grown = host_transcripts / "proj" / "small.jsonl"
    with grown.open("ab") as appended:
        appended.write(grown.read_bytes().splitlines(keepends=True)[-1])
    unreadable = host_transcripts / "proj" / "unreadable.jsonl"
    unreadable.write_bytes(b"{}\n")
    unreadable.chmod(0o600)  # root's: the upload runs as OWNER
    try:
        assert _upload(profile) == 1
    finally:
        unreadable.unlink()
    assert "cannot read ./proj/unreadable.jsonl" in profile.logs("seaweedfs-upload")
    assert _bucket_files(profile) == before, "nothing copied"
    assert _upload(profile) == 0, profile.logs("seaweedfs-upload")
    assert _bucket_files(profile) == _host_files(host_transcripts) != before
