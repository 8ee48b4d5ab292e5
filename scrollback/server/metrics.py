"""Prometheus metrics of both services; domain code may import this (no grpc here).

RPC metrics (requests by method and code, latency, ReadMedia bytes) are fed by
the interceptors in `scrollback.server.interceptors` (`rpc_log`); the domain hooks are
`PAYLOADS_STRIPPED` (history: payloads cut from served lines),
`PIN_MISMATCHES` (media: refs refused because the transcript changed) and
`BLOB_VERIFY_FAILURES` (media: stored blobs whose bytes no longer match).

The endpoint is off by default; `SCROLLBACK_HISTORY_METRICS_ADDR` /
`SCROLLBACK_MEDIA_METRICS_ADDR` (HOST:PORT, port 0 picks one) turn it on.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server

RPC_REQUESTS = Counter(
    "scrollback_rpc_requests",
    "RPCs handled, by service, method and status code.",
    ["service", "method", "code"],
)
RPC_LATENCY = Histogram(
    "scrollback_rpc_latency_seconds",
    "RPC duration from start to status, by service and method.",
    ["service", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
READ_MEDIA_BYTES = Counter(
    "scrollback_read_media_bytes_sent",
    "Media bytes handed to gRPC by ReadMedia (counted when each stream ends).",
)
LIMIT_REFUSALS = Counter(
    "scrollback_limit_refusals", "Calls refused for a per-principal limit.", ["limit"]
)
PAYLOADS_STRIPPED = Counter(
    "scrollback_payloads_stripped", "Base64 payloads cut out of served transcript lines."
)
PIN_MISMATCHES = Counter(
    "scrollback_pin_mismatches",
    "Transcript media refs refused because their pin no longer matches.",
)
BLOB_VERIFY_FAILURES = Counter(
    "scrollback_blob_verify_failures", "Stored blobs whose bytes no longer match their digest."
)

_lock = threading.Lock()
_servers: dict[tuple[str, int], Any] = {}


def serve_metrics(address: str) -> int:
    """Expose the default registry over HTTP on HOST:PORT; return the bound port.

    Two servers in one process asking for the same address share one endpoint.
    """
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    port = int(port_text)
    with _lock:
        existing = _servers.get((host, port))
        if existing is not None and port != 0:
            return int(existing.server_port)
        server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
        bound = int(server.server_port)
        _servers[(host, bound)] = server
        if port != 0:
            _servers[(host, port)] = server
        return bound


def serve_summed_metrics(address: str, directory: Path) -> int:
    """The endpoint of a service's parent (scrollback.server.workers) on HOST:PORT: every
    worker's metrics in prometheus_client's multiprocess `directory`, summed; the bound port."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    host, _, port_text = address.rpartition(":")
    server, _thread = start_http_server(
        int(port_text), addr=host.strip("[]") or "127.0.0.1", registry=registry
    )
    return int(server.server_port)
