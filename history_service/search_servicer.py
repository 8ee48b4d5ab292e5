"""The SearchService servicer: translates protos to the Searcher and back.

Served by the history server (it owns the transcripts and who sees them),
with the history service's error table (docs/contract.md §9), applied once by
`maps_errors` like the other servicers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from history_service.errors import ERROR_TABLE, InvalidArgumentError
from history_service.search.query import Filters, check_values, page_size, parse_query
from history_service.search.searcher import Searcher, SearchHit
from history_service.search.store import Order
from scrollback.contract.refs import validate_session_id
from scrollback.search.v1 import search_pb2 as pb
from scrollback.search.v1 import search_pb2_grpc
from scrollback.server.caller import current_principal
from scrollback.server.grpc_support import maps_errors

Context = grpc.aio.ServicerContext[Any, Any]

SEARCH_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearchService"].full_name
_PHOTOS = {
    pb.PHOTO_FILTER_UNSPECIFIED: None,
    pb.PHOTO_FILTER_WITH_PHOTOS: True,
    pb.PHOTO_FILTER_WITHOUT_PHOTOS: False,
}
_ORDERS = {
    pb.SEARCH_ORDER_UNSPECIFIED: Order.RELEVANCE,
    pb.SEARCH_ORDER_RELEVANCE: Order.RELEVANCE,
    pb.SEARCH_ORDER_NEWEST: Order.NEWEST,
}


def order_of(request: pb.SearchRequest) -> Order:
    """The order a request asks for (InvalidArgumentError for an unknown value)."""
    if request.order not in _ORDERS:
        raise InvalidArgumentError("unknown search order")
    return _ORDERS[request.order]


def validate_project_dir(name: str) -> str:
    """A project dir filter: a plain directory name (InvalidArgumentError otherwise).

    A POSIX directory name may hold `\\`, so ListSessions can list such a project:
    the filter takes every name a listing can show.
    """
    if name and (len(name) > 255 or "/" in name or "\0" in name or name in (".", "..")):
        raise InvalidArgumentError("malformed project dir")
    return name


def filters_of(request: pb.SearchRequest) -> Filters:
    """The validated filters of a request."""
    if request.session_id:
        validate_session_id(request.session_id)
    if request.photos not in _PHOTOS:
        raise InvalidArgumentError("unknown photo filter")
    start = request.start_time.ToMilliseconds() if request.HasField("start_time") else None
    end = request.end_time.ToMilliseconds() if request.HasField("end_time") else None
    if start is not None and end is not None and end <= start:
        raise InvalidArgumentError("the time range ends before it starts")
    return Filters(
        project_dir=validate_project_dir(request.project_dir),
        session_id=request.session_id,
        types=check_values(list(request.entry_types), "entry types"),
        roles=check_values(list(request.roles), "roles"),
        start_ms=start,
        end_ms=end,
        photos=_PHOTOS[request.photos],
    )


def hit_to_proto(hit: SearchHit) -> pb.SearchHit:
    """A hit as its message."""
    return pb.SearchHit(
        session_id=hit.session_id,
        project_dir=hit.project_dir,
        entry_uuid=hit.entry_uuid,
        type=hit.type,
        role=hit.role,
        timestamp=hit.timestamp,
        byte_offset=hit.byte_offset,
        snippet=pb.Snippet(
            text=hit.snippet.text,
            highlights=[pb.Highlight(start=a, end=b) for a, b in hit.snippet.highlights],
        ),
        has_photos=hit.has_photos,
        window_page_token=hit.window_page_token,
    )


@maps_errors(ERROR_TABLE)
class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    """scrollback.search.v1.SearchService over one Searcher."""

    def __init__(self, searcher: Searcher) -> None:
        self._searcher = searcher

    async def Search(
        self, request: pb.SearchRequest, context: Context
    ) -> AsyncIterator[pb.SearchResponse]:
        query = parse_query(request.query)
        filters = filters_of(request)
        size = page_size(request.page_size)
        page = await asyncio.to_thread(
            self._searcher.search,
            current_principal(),
            query,
            filters,
            size,
            request.page_token,
            order_of(request),
        )
        for hit in page.hits:
            yield pb.SearchResponse(hit=hit_to_proto(hit))
        end = pb.SearchEnd(next_page_token=page.next_page_token, partial=page.partial)
        yield pb.SearchResponse(end=end)
