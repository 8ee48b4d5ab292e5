"""Starting and running the media server: grpc.aio with health, reflection and periodic GC.

`open_metadata_store(config)` picks the blob metadata backend: the embedded
SQLite database in the state dir, or PostgreSQL when `database_url` is set
(several replicas sharing one database and one blobs volume).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import grpc

from media_service.blob_paths import BlobPaths
from media_service.blobs import BlobStore, Clock
from media_service.config import MediaConfig
from media_service.gc import GcReport, collect_garbage
from media_service.instance import MediaInstance
from media_service.library import MediaLibrary
from media_service.servicer import MediaServicer, add_media_servicer
from media_service.store.base import BlobMetadataStore
from media_service.store.sqlite import SqliteBlobMetadataStore
from media_service.transcript_media import TranscriptMedia
from scrollback.media.v1 import media_pb2
from scrollback.server.grpc_support import RunningServer, build_server
from scrollback.server.interceptors import prepare_security
from scrollback.server.listening import listening_line, wait_for_shutdown_signal
from scrollback.server.service_config import (
    Buckets,
    auth_errors_as_config_errors,
    open_database_pool,
    open_line_index,
    open_transcript_source,
)

log = logging.getLogger(__name__)

SERVICE_NAME = media_pb2.DESCRIPTOR.services_by_name["MediaService"].full_name
# Room for a 256 KiB data chunk plus framing, and for upload chunks.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


@dataclass
class RunningMediaServer(RunningServer):
    """A running media server, with its blob store and GC task."""

    library: MediaLibrary | None = None
    servicer: MediaServicer | None = None
    gc_task: asyncio.Task[None] | None = None
    closers: list[BlobMetadataStore | TranscriptMedia] = field(default_factory=list)
    metrics_port: int | None = None

    async def stop(self, grace: float = 5.0) -> None:
        """Stop GC, drain in-flight calls, close the store."""
        if self.gc_task is not None:
            self.gc_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.gc_task
        await super().stop(grace)
        for closer in self.closers:
            closer.close()


async def _gc_loop(blobs: BlobStore, config: MediaConfig, clock: Clock) -> None:
    while True:
        await asyncio.sleep(config.gc_interval_seconds)
        try:
            await asyncio.to_thread(
                collect_garbage, blobs, now=clock(), grace_seconds=config.gc_grace_seconds
            )
        except Exception:
            log.exception("garbage collection failed")


def open_metadata_store(config: MediaConfig) -> BlobMetadataStore:
    """The metadata backend the configuration selects (blocking; ConfigError if unreachable)."""
    if not config.database_url:
        return SqliteBlobMetadataStore(config.state_dir)
    from media_service.store.postgres import PostgresBlobMetadataStore

    return PostgresBlobMetadataStore(open_database_pool(config.database_url, name="media"))


def open_blob_store(
    config: MediaConfig, *, clock: Clock | None = None
) -> tuple[BlobStore, BlobMetadataStore]:
    """The blob store of the configured state dir and metadata backend (blocking).

    The caller closes the returned metadata store.
    """
    metadata = open_metadata_store(config)
    blobs = BlobStore(
        BlobPaths(config.state_dir),
        metadata,
        max_blob_size=config.max_blob_size,
        clock=clock or time.time,
    )
    return blobs, metadata


def collect_garbage_now(config: MediaConfig, *, grace_seconds: float) -> GcReport:
    """One garbage collection over the configured store, as the server's periodic task runs it.

    `scrollback gc` uses this; it needs the state dir and the metadata backend,
    not the transcripts root.
    """
    blobs, metadata = open_blob_store(config)
    try:
        return collect_garbage(blobs, now=time.time(), grace_seconds=grace_seconds)
    finally:
        metadata.close()


def build_library(
    config: MediaConfig, *, clock: Clock | None = None
) -> tuple[MediaLibrary, BlobMetadataStore]:
    """The domain objects of a media server (also usable without gRPC)."""
    blobs, metadata = open_blob_store(config, clock=clock)
    root = open_transcript_source(
        config.transcripts,
        Buckets(config.bucket_cache_bytes),
        codex=config.codex_sessions,
        opencode=config.opencode_db,
        gemini=config.gemini_home,
    )
    try:
        line_index = open_line_index(config.state_dir, config.database_url)
    except BaseException:
        metadata.close()
        raise
    transcripts = TranscriptMedia(
        root,
        max_line_size=config.max_line_size,
        cache_entries=config.line_cache_entries,
        line_index=line_index,
    )
    return MediaLibrary(transcripts, blobs, root), metadata


async def start_media_server(
    config: MediaConfig, *, clock: Clock | None = None
) -> RunningMediaServer:
    """Validate, clean stale uploads, bind and start; GC runs every gc_interval."""
    config.validate()
    with auth_errors_as_config_errors():
        security = prepare_security(
            "media",
            config.security,
            address=config.addr,
            insecure=config.insecure,
            auth_configured=config.auth_configured,
            byte_counted_methods=frozenset({"ReadMedia"}),
            stall_timeout=config.stall_timeout_seconds,
        )
    library, metadata = await asyncio.to_thread(build_library, config, clock=clock)
    removed = await asyncio.to_thread(library.blobs.remove_stale_temps)
    if removed:
        log.info("removed %d stale upload temp files", removed)
    servicer = MediaServicer(
        MediaInstance(library, config),
        chunk_size=config.chunk_size,
        write_idle_timeout=config.write_idle_timeout_seconds,
        write_deadline=config.write_deadline_seconds,
    )

    def register(server: grpc.aio.Server) -> None:
        add_media_servicer(servicer, server)

    try:
        running = await build_server(
            config.addr,
            register,
            [SERVICE_NAME],
            max_message_bytes=MAX_MESSAGE_BYTES,
            interceptors=security.interceptors,
            credentials=security.credentials,
        )
    except BaseException:
        metadata.close()
        library.transcripts.close()
        raise
    gc_task = asyncio.create_task(_gc_loop(library.blobs, config, clock or time.time))
    return RunningMediaServer(
        running.server,
        running.port,
        running.health,
        running.service_names,
        library=library,
        servicer=servicer,
        gc_task=gc_task,
        closers=[metadata, library.transcripts],
        metrics_port=security.metrics_port,
    )


async def serve(config: MediaConfig) -> None:
    """Run until SIGINT or SIGTERM, then stop gracefully."""
    running = await start_media_server(config)
    try:
        waiter = asyncio.create_task(wait_for_shutdown_signal())
        await asyncio.sleep(0)  # the signal handlers are installed before we say we listen
        log.info("%s", listening_line("media service", config.addr, running.port))
        await waiter
    finally:
        await running.stop()
