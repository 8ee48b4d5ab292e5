"""The gateway's HTTP connections send without Nagle's delay (issue 15: the fixed ~40 ms per photo).

The gateway binds its own listening socket (`gateway.server._bind`). asyncio
turns on TCP_NODELAY only for accepted sockets whose `proto` is IPPROTO_TCP,
and an accepted socket takes the listener's; a listener made with proto 0 left
Nagle on, so each photo's last partial segment waited for the client's delayed
ACK. The test looks at the real uvicorn server's accepted connection.
"""

from __future__ import annotations

import asyncio
import socket

from gateway.config import GatewayConfig
from gateway.server import start_gateway


async def test_accepted_http_connections_have_tcp_nodelay() -> None:
    running = await start_gateway(GatewayConfig(addr="127.0.0.1:0"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        # uvicorn keeps each open connection's protocol (and its transport) here.
        connections = list(running.server.server_state.connections)
        assert len(connections) == 1
        sock = connections[0].transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        writer.close()
        await writer.wait_closed()
    finally:
        await running.stop()
