"""The gateway's channels to the services, and the log line that says why one cannot talk.

`open_channel` opens a grpc.aio channel to a service with the TLS settings the
CLI and client read (client.tls: SCROLLBACK_TLS_CA, the client certificate of
mutual TLS, the server name), or a plaintext one without them. A failed TLS
handshake surfaces in the gateway as UNAVAILABLE (503), like a service that is
not there; `HandshakeLog` says which it is in the log: once at start and after
any UNAVAILABLE it probes the service (client.tls.explain_unavailable, at most
one probe per service at a time and per `PROBE_INTERVAL_SECONDS`) and logs a
TLS failure once per cause (a probe that times out, or finds nothing, proves
nothing either way, so a cause logged stays logged).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from client import channel_target
from client.tls import TlsOptions, explain_unavailable

log = logging.getLogger("scrollback.gateway")
PROBE_INTERVAL_SECONDS = 5.0


def open_channel(
    addr: str, tls: TlsOptions | None, extra: list[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    """A channel to the service at `addr`: TLS with `tls`, plaintext without."""
    target, options = channel_target(addr)
    options = [*options, *(extra or [])]
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(
        target, tls.credentials(), options=[*options, *tls.channel_options()]
    )


class HandshakeLog:
    """Logs why the gateway cannot speak to one service over its channel: once per cause."""

    def __init__(self, name: str, addr: str, tls: TlsOptions | None) -> None:
        self.name = name
        self.addr = addr
        self.tls = tls
        self._logged = ""
        self._last_probe = float("-inf")
        self._probe: asyncio.Task[None] | None = None

    def check(self, details: str = "") -> None:
        """Probe the service in the background (unless a probe ran or runs now) and log a
        TLS failure it finds, if not logged already."""
        loop = asyncio.get_running_loop()
        if self._probe is not None and not self._probe.done():
            return
        if loop.time() - self._last_probe < PROBE_INTERVAL_SECONDS:
            return
        self._last_probe = loop.time()
        self._probe = loop.create_task(self._explain(details))

    async def _explain(self, details: str) -> None:
        cause = await asyncio.to_thread(explain_unavailable, details, self.addr, self.tls)
        if cause and cause != self._logged:
            self._logged = cause
            log.error(
                "gateway: cannot talk to the %s service at %s: %s", self.name, self.addr, cause
            )

    async def close(self) -> None:
        """Stop a probe in progress."""
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
