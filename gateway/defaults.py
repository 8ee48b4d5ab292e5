"""The gateway's default address, in a module of its own that imports nothing.

`scrollback up` names it in its help without loading the gateway and its
client (grpc, Starlette), which a long-running `up` would keep in memory.
"""

from __future__ import annotations

DEFAULT_ADDR = "127.0.0.1:8080"
