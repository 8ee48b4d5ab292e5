"""The gRPC servicer: translates protos to HistoryCore calls and back, and errors to statuses.

`ERROR_TABLE` (history_service.errors) is the one map from domain exceptions to reasons and
status codes (docs/contract.md §9); `scrollback.server.grpc_support.maps_errors` applies it to every RPC, in
its streaming phase too, and anything not in it is INTERNAL with a fixed text. The caller's principal (set by the auth
interceptor) is read here, once per call, and passed to the core explicitly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from history_service.core import HistoryCore
from history_service.errors import ERROR_TABLE
from history_service.lines import MediaMode
from history_service.messages import (
    accepted_message,
    file_end_message,
    image_info_message,
    session_message,
    timestamp_of,
)
from history_service.slim import SlimFileStart, SlimStart, slim_options
from history_service.watch import WatchAccepted, WatchEntry
from history_service.window_wire import entry_messages, window_responses
from scrollback.contract.refs import validate_session_id
from scrollback.history.v1 import history_pb2 as pb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.server.caller import current_principal
from scrollback.server.grpc_support import (
    add_servicer_sending_serialized,
    maps_errors,
)
from scrollback.server.serialized import Serialized

Context = grpc.aio.ServicerContext[Any, Any]

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["HistoryService"].full_name


@maps_errors(ERROR_TABLE)
class HistoryServicer(history_pb2_grpc.HistoryServiceServicer):
    """scrollback.history.v1.HistoryService on a HistoryCore."""

    def __init__(self, core: HistoryCore) -> None:
        self._core = core

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Context
    ) -> pb.ListSessionsResponse:
        sessions, token = await self._core.list_sessions(
            current_principal(), request.page_size, request.page_token, request.project_dir
        )
        return pb.ListSessionsResponse(
            sessions=[session_message(info, detail) for info, detail in sessions],
            next_page_token=token,
        )

    async def GetSession(
        self, request: pb.GetSessionRequest, context: Context
    ) -> pb.GetSessionResponse:
        info, detail = await self._core.get_session(current_principal(), request.session_id)
        return pb.GetSessionResponse(session=session_message(info, detail))

    async def ReadWindow(  # type: ignore[override]  # serialized responses pass through
        self, request: pb.ReadWindowRequest, context: Context
    ) -> AsyncIterator[pb.ReadWindowResponse | Serialized]:
        params = self._core.window_params(
            request.session_id,
            request.page_size,
            request.page_token,
            request.direction,
            request.media_mode,
            request.inline_limit_bytes,
        )
        principal = current_principal()
        window, links = await self._core.read_window_with_links(principal, params)
        async for response in window_responses(
            pb.ReadWindowResponse, params.session_id, window, links, request.max_batch_bytes
        ):
            yield response

    async def Bootstrap(  # type: ignore[override]  # serialized responses pass through
        self, request: pb.BootstrapRequest, context: Context
    ) -> AsyncIterator[pb.BootstrapResponse | Serialized]:
        result = await self._core.bootstrap(
            current_principal(),
            request.session_id,
            request.chat_key,
            request.page_size,
            request.media_mode,
            request.inline_limit_bytes,
        )
        yield pb.BootstrapResponse(
            header=pb.BootstrapHeader(
                pending=[accepted_message(r) for r in result.pending],
                watch_position=result.watch_position,
                session_id=result.session_id,
            )
        )
        window = result.window
        if window is None:
            yield pb.BootstrapResponse(end=pb.WindowEnd())
            return
        async for response in window_responses(
            pb.BootstrapResponse, result.session_id, window, result.links, request.max_batch_bytes
        ):
            yield response

    async def AcceptMessage(
        self, request: pb.AcceptMessageRequest, context: Context
    ) -> pb.AcceptMessageResponse:
        record, replayed = await self._core.accept(
            current_principal(),
            request.client_txn_id,
            request.session_id,
            request.chat_key,
            request.text,
            [(a.ref, a.name, a.media_type) for a in request.attachments],
        )
        return pb.AcceptMessageResponse(message=accepted_message(record), replayed=replayed)

    async def BindChatKey(
        self, request: pb.BindChatKeyRequest, context: Context
    ) -> pb.BindChatKeyResponse:
        moved = await self._core.bind(current_principal(), request.chat_key, request.session_id)
        return pb.BindChatKeyResponse(bound_messages=moved)

    async def WatchSession(
        self, request: pb.WatchSessionRequest, context: Context
    ) -> AsyncIterator[pb.WatchSessionResponse]:
        core = self._core
        principal = current_principal()
        core.check_target(principal, request.session_id, request.chat_key)
        mode, limit = core.watch_mode(request.media_mode, request.inline_limit_bytes)
        scope, start = await core.watcher.start(
            principal, request.session_id, request.chat_key, request.position
        )
        events = core.watcher.events(
            principal,
            request.session_id,
            request.chat_key,
            scope,
            start,
            MediaMode(mode),
            limit,
        )
        async for event in events:
            if isinstance(event, WatchEntry):
                messages = list(entry_messages(event.session_id, event.line))
                for index, message in enumerate(messages):
                    position = event.position if index == len(messages) - 1 else ""
                    if isinstance(message, pb.Entry):
                        yield pb.WatchSessionResponse(entry=message, position=position)
                    else:
                        yield pb.WatchSessionResponse(entry_json_chunk=message, position=position)
            elif isinstance(event, WatchAccepted):
                yield pb.WatchSessionResponse(
                    accepted=accepted_message(event.record), position=event.position
                )
            else:
                yield pb.WatchSessionResponse(
                    heartbeat=pb.Heartbeat(sent_time=timestamp_of(event.sent_at)),
                    position=event.position,
                )

    async def SlimSession(
        self, request: pb.SlimSessionRequest, context: Context
    ) -> AsyncIterator[pb.SlimSessionResponse]:
        validate_session_id(request.session_id)
        options = slim_options(
            request.fork_session_id,
            request.images == pb.SLIM_IMAGES_DOWNSCALE,
            request.max_side,
            request.max_bytes,
            request.keep_last,
        )
        events = self._core.slim(
            current_principal(), request.session_id, options, request.include_subagents
        )
        async for event in events:
            if isinstance(event, bytes):
                yield pb.SlimSessionResponse(data=event)
            elif isinstance(event, SlimFileStart):
                yield pb.SlimSessionResponse(
                    file=pb.SlimFile(
                        session_id=event.session_id,
                        relative_path=event.relative_path,
                        is_subagent=event.is_subagent,
                        source_size_bytes=event.source_size_bytes,
                    )
                )
            elif isinstance(event, SlimStart):
                yield pb.SlimSessionResponse(
                    header=pb.SlimHeader(
                        session_id=event.session_id,
                        project_dir=event.project_dir,
                        copy_session_id=event.copy_session_id,
                        source=event.source,
                    )
                )
            else:
                yield pb.SlimSessionResponse(file_end=file_end_message(event))

    async def ListImages(
        self, request: pb.ListImagesRequest, context: Context
    ) -> AsyncIterator[pb.ListImagesResponse]:
        records = await self._core.images(
            current_principal(), request.session_id, request.include_subagents
        )
        totals = pb.ImageTotals()
        for record in records:
            info = image_info_message(record)
            if record.kind == "image":
                totals.images += 1
            else:
                totals.documents += 1
            totals.with_problems += 1 if record.problems else 0
            totals.size_bytes += record.facts.size_bytes
            yield pb.ListImagesResponse(image=info)
        yield pb.ListImagesResponse(totals=totals)


# The streams whose responses may be sent already serialized (bytes).
PASSTHROUGH_METHODS = ("ReadWindow", "Bootstrap")


def add_history_servicer(servicer: HistoryServicer, server: grpc.aio.Server) -> None:
    """Register the servicer as the generated code does, but ReadWindow and Bootstrap send
    bytes they are given as they are (entries encoded once, history_service.entry_cache)."""
    add_servicer_sending_serialized(
        history_pb2_grpc.add_HistoryServiceServicer_to_server,
        servicer,
        server,
        SERVICE_NAME,
        PASSTHROUGH_METHODS,
    )
