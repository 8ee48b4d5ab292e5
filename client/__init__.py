"""Typed sync and asyncio clients of the Scrollback history and media services.

- `Client` / `AsyncClient`: both services, plus `send` (upload, then accept).
- `HistoryClient` / `AsyncHistoryClient`: windows, `iter_window`, bootstrap,
  accept, a self-resuming `watch`.
- `MediaClient` / `AsyncMediaClient`: verified, resumable, cached media reads,
  and uploads.
- `reconcile_pending`: the one comparison of pending messages with entries.
- `media_selector`: a MediaSelector from a ref's string form (and its pin).
- `client.errors`: one exception class per status code.
- `TlsOptions`: TLS / mutual TLS (`tls=`, or the SCROLLBACK_TLS_* variables).
- `DEFAULT_HISTORY_ADDR`, `DEFAULT_MEDIA_ADDR`, `channel_target`: where the services
  listen by default, and the gRPC target and channel options of an address.
"""

from client._core import (
    DEFAULT_HISTORY_ADDR,
    DEFAULT_MEDIA_ADDR,
    Deadlines,
    Media,
    MediaCache,
    RetryPolicy,
    WatchEvent,
    Window,
    channel_target,
    media_selector,
)
from client.aio import AsyncClient, AsyncHistoryClient, AsyncMediaClient
from client.client import Client
from client.history import HistoryClient
from client.media import MediaClient
from client.reconcile import Reconciliation, reconcile_pending
from client.tls import TlsOptions

__all__ = [
    "DEFAULT_HISTORY_ADDR",
    "DEFAULT_MEDIA_ADDR",
    "AsyncClient",
    "AsyncHistoryClient",
    "AsyncMediaClient",
    "Client",
    "Deadlines",
    "HistoryClient",
    "Media",
    "MediaCache",
    "MediaClient",
    "Reconciliation",
    "RetryPolicy",
    "TlsOptions",
    "WatchEvent",
    "Window",
    "channel_target",
    "media_selector",
    "reconcile_pending",
]
