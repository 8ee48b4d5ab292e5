"""What every client object shares: its channel and closing it (`with` / `async with`).

`SyncChannelClient` opens (or adopts) a grpc channel for the sync clients,
`AsyncChannelClient` a grpc.aio channel for the asyncio ones; each closes only
a channel it opened. A channel it opens speaks TLS when `tls` (or the
SCROLLBACK_TLS_* variables, see client.tls) says so, else plaintext. `Closing` / `AsyncClosing` turn `close()` into the
context-manager protocol for them and for the two-service `Client`s.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import grpc

from client._core import call_metadata, channel_target
from client.tls import TlsOptions, resolve_tls


class Closing:
    """`with client:` closes it at the end of the block."""

    def close(self) -> None:
        """Release what the client holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """`async with client:` closes it at the end of the block."""

    async def close(self) -> None:
        """Release what the client holds."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


class SyncChannelClient(Closing):
    """A sync client's channel (opened unless given), call metadata and retry jitter."""

    def __init__(
        self,
        addr: str,
        channel: grpc.Channel | None,
        interceptors: Sequence[Any],
        metadata: Sequence[tuple[str, str]],
        token: str | None,
        rng: random.Random | None,
        tls: TlsOptions | bool | None = None,
    ) -> None:
        self.addr = addr
        self._own = channel is None
        if channel is None:
            target, options = channel_target(addr)
            settings = resolve_tls(tls)
            if settings is None:
                channel = grpc.insecure_channel(target, options=options)
            else:
                channel = grpc.secure_channel(
                    target,
                    settings.credentials(),
                    options=[*options, *settings.channel_options()],
                )
        self._channel = channel
        # What stubs call through: the channel behind the interceptors, if any.
        self._intercepted = (
            grpc.intercept_channel(channel, *interceptors) if interceptors else channel
        )
        self.metadata = call_metadata(metadata, token)
        self._rng = rng or random.Random()

    def close(self) -> None:
        """Close the channel (when this client opened it)."""
        if self._own:
            self._channel.close()


class AsyncChannelClient(AsyncClosing):
    """An asyncio client's channel (opened unless given), call metadata and retry jitter."""

    def __init__(
        self,
        addr: str,
        channel: grpc.aio.Channel | None,
        interceptors: Sequence[Any],
        metadata: Sequence[tuple[str, str]],
        token: str | None,
        rng: random.Random | None,
        tls: TlsOptions | bool | None = None,
    ) -> None:
        self.addr = addr
        self._own = channel is None
        if channel is None:
            target, options = channel_target(addr)
            settings = resolve_tls(tls)
            if settings is None:
                channel = grpc.aio.insecure_channel(
                    target, options=options, interceptors=list(interceptors) or None
                )
            else:
                channel = grpc.aio.secure_channel(
                    target,
                    settings.credentials(),
                    options=[*options, *settings.channel_options()],
                    interceptors=list(interceptors) or None,
                )
        self._channel = channel
        self.metadata = call_metadata(metadata, token)
        self._rng = rng or random.Random()

    async def close(self) -> None:
        """Close the channel (when this client opened it)."""
        if self._own:
            await self._channel.close(None)
