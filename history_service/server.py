"""Starting and running the history server.

`start_history_server(config)` validates the config, opens the state store and
the bus (`open_store_and_bus`: SQLite and the in-process bus by default;
PostgreSQL and its LISTEN/NOTIFY bus when `database_url` is set) and starts a grpc.aio server (health + reflection, via scrollback.server.grpc_support)
on the configured address, with the search service beside it (its index in
`<state>/search.sqlite`, or PostgreSQL, kept up to date by a background
task); `serve(config)` runs it until SIGINT or SIGTERM,
then stops gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from history_service.bus import AcceptedBus, InProcessBus, PollingBus
from history_service.config import HistoryConfig
from history_service.core import HistoryCore
from history_service.insight_model import InsightStore
from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from history_service.search.searcher import Searcher
from history_service.search.store import SearchIndex
from history_service.search_servicer import SEARCH_SERVICE_NAME, SearchServicer
from history_service.servicer import SERVICE_NAME, HistoryServicer, add_history_servicer
from history_service.store.base import AcceptedMessageStore
from history_service.store.insight import PostgresInsightStore, SqliteInsightStore
from history_service.store.sqlite import SqliteAcceptedMessageStore
from history_service.tokens import TokenCodec, load_or_create_key
from scrollback.search.v1 import search_pb2_grpc
from scrollback.server.grpc_support import RunningServer, build_server
from scrollback.server.interceptors import prepare_security
from scrollback.server.listening import listening_line, wait_for_shutdown_signal
from scrollback.server.service_config import (
    Buckets,
    ConfigError,
    auth_errors_as_config_errors,
    open_database_pool,
    open_line_index,
    open_transcript_source,
)
from scrollback.server.worker_role import current_role
from scrollback.transcripts import TranscriptSource

log = logging.getLogger(__name__)


@dataclass
class RunningHistoryServer:
    """A started history server and its domain core."""

    running: RunningServer
    core: HistoryCore
    metrics_port: int | None = None
    search: SearchParts | None = None

    @property
    def port(self) -> int:
        """The port the server bound."""
        return self.running.port

    async def stop(self, grace: float = 5.0) -> None:
        """Stop serving (in-flight calls get `grace` seconds) and close the store."""
        await self.running.stop(grace)
        if self.search is not None:
            await self.search.stop()
        self.core.close()


@dataclass
class SearchParts:
    """The search index, its indexer and the indexer's background task."""

    index: SearchIndex
    indexer: SearchIndexer
    task: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        """Stop indexing, wait for a pass in flight, then close the index.

        Closing the index under a pass still running in its thread would close
        SQLite connections in use (a crash, not an error).
        """
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.indexer.stop()
        await asyncio.to_thread(self.index.close)


async def open_search_index(config: HistoryConfig) -> SearchIndex:
    """The search index the configuration selects: Tantivy embedded, or PostgreSQL."""
    if not config.database_url:
        return await asyncio.to_thread(TantivySearchIndex, config.state_dir)
    from history_service.search.postgres import PostgresSearchIndex

    pool = await asyncio.to_thread(open_database_pool, config.database_url, name="history-search")
    try:
        return await asyncio.to_thread(PostgresSearchIndex, pool)
    except BaseException:
        pool.close()
        raise


async def open_store_and_bus(config: HistoryConfig) -> tuple[AcceptedMessageStore, AcceptedBus]:
    """The accepted-message store and bus the configuration selects.

    Raises ConfigError (never showing the URL) when PostgreSQL is unreachable.
    """
    if not config.database_url:
        store = await asyncio.to_thread(
            SqliteAcceptedMessageStore,
            config.state_dir,
            keep=config.pending_keep,
            ttl_seconds=config.pending_ttl_seconds,
        )
        if current_role() is None:
            return store, InProcessBus()
        # Worker processes on one SQLite file: other workers' accepts wake watches by poll.
        bus = PollingBus(
            store.last_seq,
            poll_seconds=min(config.watch_poll_seconds, config.bus_resync_seconds),
        )
        await bus.start()
        return store, bus
    from history_service.bus_postgres import PostgresBus
    from history_service.store.postgres import PostgresAcceptedMessageStore
    from scrollback.state.postgres import DatabaseUnavailableError

    pool = await asyncio.to_thread(open_database_pool, config.database_url, name="history")
    pg_store = PostgresAcceptedMessageStore(
        pool, keep=config.pending_keep, ttl_seconds=config.pending_ttl_seconds
    )
    pg_bus = PostgresBus(config.database_url, pool, resync_seconds=config.bus_resync_seconds)
    try:
        await pg_bus.start()
    except BaseException as error:
        pg_bus.close()
        pg_store.close()
        if isinstance(error, Exception) and type(error).__module__.startswith("psycopg"):
            raise ConfigError(str(DatabaseUnavailableError())) from None
        raise
    return pg_store, pg_bus


async def open_insight_store(config: HistoryConfig, store: AcceptedMessageStore) -> InsightStore:
    """The insight index beside the store: in its PostgreSQL pool, else in SQLite."""
    if config.database_url:
        from history_service.store.postgres import PostgresAcceptedMessageStore

        if isinstance(store, PostgresAcceptedMessageStore):
            return PostgresInsightStore(store.pool)
    return await asyncio.to_thread(SqliteInsightStore, config.state_dir)


def _warn_if_empty(root: Path) -> None:
    """Say at start that a transcripts root with no project directory serves nothing."""
    try:
        empty = not any(entry.is_dir() for entry in root.iterdir())
    except OSError:
        return  # unreadable: the listing says so on each call
    if empty:
        log.warning(
            "the transcripts root %s holds no project directory: no session to serve "
            "(SCROLLBACK_TRANSCRIPTS; in a container, a host directory that does not exist, "
            "such as a missing ~/.claude/projects, is mounted as an empty one)",
            root,
        )


async def _open_core(config: HistoryConfig, root: TranscriptSource) -> HistoryCore:
    """The state the RPCs share: store and bus, line index, insight store; closed on failure."""
    store, bus = await open_store_and_bus(config)
    try:
        line_index = await asyncio.to_thread(open_line_index, config.state_dir, config.database_url)
    except BaseException:
        bus.close()
        store.close()
        raise
    try:
        insight_store = await open_insight_store(config, store)
        return HistoryCore(
            config,
            root,
            TokenCodec(load_or_create_key(config.state_dir)),
            store,
            bus,
            insight_store,
            line_index,
        )
    except BaseException:
        bus.close()
        store.close()
        line_index.close()
        raise


def _search_parts(
    config: HistoryConfig, buckets: Buckets, core: HistoryCore, index: SearchIndex
) -> SearchParts:
    """The search index and the indexer that fills it (not started yet)."""
    # The indexer walks its own view of the root (refreshed at each pass), so its
    # passes never age the snapshot that ListSessions and ReadWindow answer from;
    # its passes, at start and every few seconds, report the files skipped.
    indexer_root = open_transcript_source(
        config.transcripts,
        buckets,
        rescan_interval=0,
        report_skipped=True,
        codex=config.codex_sessions,
        opencode=config.opencode_db,
        gemini=config.gemini_home,
    )
    # Each pass reads a file once for search, its line index and its insight.
    indexer = SearchIndexer(
        indexer_root,
        index,
        max_line_size=config.max_line_size,
        line_index=core.line_index,
        insight=core.insight,
    )
    return SearchParts(index, indexer)


async def start_history_server(config: HistoryConfig) -> RunningHistoryServer:
    """Validate the config and start the server; raises ConfigError or BindRefusedError."""
    config.validate()
    buckets = Buckets(config.bucket_cache_bytes)
    if isinstance(config.transcripts, Path):
        _warn_if_empty(config.transcripts)
    # A bucket root checks its bucket (a ConfigError if missing or refused) before anything opens.
    root = await asyncio.to_thread(
        open_transcript_source,
        config.transcripts,
        buckets,
        rescan_interval=config.rescan_interval_seconds,
        codex=config.codex_sessions,
        opencode=config.opencode_db,
        gemini=config.gemini_home,
    )
    with auth_errors_as_config_errors():
        security = prepare_security(
            "history",
            config.security,
            address=config.addr,
            insecure=config.insecure,
            auth_configured=config.auth_configured,
            stall_timeout=config.stall_timeout_seconds,
        )
    core = await _open_core(config, root)
    try:
        index = await open_search_index(config)
    except BaseException:
        core.close()
        raise
    search = _search_parts(config, buckets, core, index)
    searcher = Searcher(core.root, index, core.codec)

    def register(server: grpc.aio.Server) -> None:
        add_history_servicer(HistoryServicer(core), server)
        search_pb2_grpc.add_SearchServiceServicer_to_server(SearchServicer(searcher), server)

    try:
        running = await build_server(
            config.addr,
            register,
            [SERVICE_NAME, SEARCH_SERVICE_NAME],
            interceptors=security.interceptors,
            credentials=security.credentials,
        )
    except BaseException:
        await search.stop()
        core.close()
        raise
    if config.search_indexing:
        search.task = asyncio.create_task(search.indexer.run(config.search_interval_seconds))
    return RunningHistoryServer(running, core, security.metrics_port, search)


async def serve(config: HistoryConfig) -> None:
    """Run the history server until SIGINT or SIGTERM, then stop gracefully."""
    server = await start_history_server(config)
    log.info("%s", listening_line("history service", config.addr, server.port))
    try:
        await wait_for_shutdown_signal()
    finally:
        await server.stop()
