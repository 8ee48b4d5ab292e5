"""Serving the gateway with uvicorn: `start_gateway` (tests, `scrollback up`) and `serve`.

`start_gateway(config)` binds (port 0 picks a free one), serves in the
current event loop and returns a `RunningGateway` with the bound port and a
`stop()`; `serve(config)` runs until SIGINT/SIGTERM. Connections are served by
`gateway.protocol` (uvicorn's httptools protocol with a header timeout and
connection caps). `X-Forwarded-For` and `X-Forwarded-Proto` are believed only from
the peers of SCROLLBACK_GATEWAY_TRUSTED_PROXIES (none by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from gateway.app import create_app
from gateway.config import GatewayConfig, split_addr
from gateway.protocol import guarded_protocol
from scrollback.server.listening import (
    BindRefusedError,
    ListenError,
    listen_reason,
    listening_line,
    url_of,
)

log = logging.getLogger("scrollback.gateway")


@dataclass
class RunningGateway:
    """A gateway serving in this event loop."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int

    async def stop(self) -> None:
        """Stop accepting, finish (or cut) open responses, close the channels."""
        # Open SSE streams never end by themselves: uvicorn cuts them after
        # timeout_graceful_shutdown, then runs the lifespan's shutdown.
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def _bind(addr: str) -> socket.socket:
    host, port = split_addr(addr)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP, and they inherit the listener's. With Nagle on, a response's
    # last partial segment waited for the client's delayed ACK (~40 ms per photo).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ListenError(addr, listen_reason(error)) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def start_gateway(
    config: GatewayConfig, wrap: Callable[[ASGIApp], ASGIApp] | None = None
) -> RunningGateway:
    """Bind and serve in the background of the current loop (`wrap`: ASGI middleware)."""
    app: ASGIApp = create_app(config)
    proxies = [str(network) for network in config.trusted_proxy_networks()]
    sock = _bind(config.addr)
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(
            wrap(app) if wrap is not None else app,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=1,
            http=guarded_protocol(config),
            # Forwarded headers only from the proxies the operator lists: uvicorn would
            # otherwise believe any loopback peer (FORWARDED_ALLOW_IPS, 127.0.0.1 by default).
            proxy_headers=bool(proxies),
            forwarded_allow_ips=proxies,
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise BindRefusedError("the gateway did not start")
        await asyncio.sleep(0.01)
    log.info("%s", listening_line("gateway", config.addr, port))
    return RunningGateway(server, task, port)


async def serve(config: GatewayConfig) -> None:
    """Serve until SIGINT/SIGTERM."""
    from scrollback.server.listening import wait_for_shutdown_signal

    running = await start_gateway(config)
    print(f"gateway: open the viewer at {url_of(config.addr, running.port)}", flush=True)
    try:
        await wait_for_shutdown_signal()
    finally:
        await running.stop()
