"""Starting and running the history server.

`start_history_server(config)` validates the config, opens the state store and
starts a grpc.aio server (health + reflection, via scrollback.grpc_support)
on the configured address; `serve(config)` runs it until SIGINT or SIGTERM,
then stops gracefully.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from history_service.bus import InProcessBus
from history_service.config import HistoryConfig
from history_service.core import HistoryCore
from history_service.servicer import SERVICE_NAME, HistoryServicer
from history_service.store.sqlite import SqliteAcceptedMessageStore
from history_service.tokens import TokenCodec, load_or_create_key
from scrollback.grpc_support import (
    RunningServer,
    build_server,
    check_bind_allowed,
    wait_for_shutdown_signal,
)
from scrollback.history.v1 import history_pb2_grpc
from scrollback.transcripts import TranscriptRoot

log = logging.getLogger(__name__)


@dataclass
class RunningHistoryServer:
    """A started history server and its domain core."""

    running: RunningServer
    core: HistoryCore

    @property
    def port(self) -> int:
        """The port the server bound."""
        return self.running.port

    async def stop(self, grace: float = 5.0) -> None:
        """Stop serving (in-flight calls get `grace` seconds) and close the store."""
        await self.running.stop(grace)
        self.core.close()


async def start_history_server(config: HistoryConfig) -> RunningHistoryServer:
    """Validate the config and start the server; raises ConfigError or BindRefusedError."""
    config.validate()
    check_bind_allowed(
        config.addr, auth_configured=config.auth_configured, insecure=config.insecure
    )
    store = SqliteAcceptedMessageStore(
        config.state_dir, keep=config.pending_keep, ttl_seconds=config.pending_ttl_seconds
    )
    core = HistoryCore(
        config,
        TranscriptRoot(config.transcripts, rescan_interval=config.rescan_interval_seconds),
        TokenCodec(load_or_create_key(config.state_dir)),
        store,
        InProcessBus(),
    )

    def register(server: grpc.aio.Server) -> None:
        history_pb2_grpc.add_HistoryServiceServicer_to_server(HistoryServicer(core), server)

    try:
        running = await build_server(config.addr, register, [SERVICE_NAME])
    except BaseException:
        core.close()
        raise
    return RunningHistoryServer(running, core)


async def serve(config: HistoryConfig) -> None:
    """Run the history server until SIGINT or SIGTERM, then stop gracefully."""
    server = await start_history_server(config)
    log.info("history service listening on port %d", server.port)
    try:
        await wait_for_shutdown_signal()
    finally:
        await server.stop()
