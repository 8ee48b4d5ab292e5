"""The gateway's rescue routes: a session's image list and a slim copy to download (contract §14).

- `GET /api/v1/sessions/{session_id}/images`: ListImages in the canonical JSON mapping (`images`,
  each with its `apiPath`, size, pixels and `problems`, and a signed `url`
  where the media service serves it; `totals`).
- `GET /api/v1/sessions/{session_id}/slim[?images=downscale]`: SlimSession of
  the session alone, streamed as an attachment `<id>.slim.jsonl`. The first
  message is awaited before the answer starts, so an unknown or hidden
  session is a 404 like any other route's, never a broken download.

Both go through the caller's token, so visibility is the services' own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.errors import HttpError
from scrollback.contract.proto_json import message_json
from scrollback.history.v1 import history_pb2 as hpb

DOWNLOAD_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def image_json(gateway: Any, info: hpb.ImageInfo, principal: str) -> dict[str, Any]:
    """One ImageInfo in the canonical JSON mapping, with a signed `url` beside its fields where
    it has a ref (null where it has none)."""
    url = gateway.media_url(info.ref.uri, info.ref.pin, principal) if info.HasField("ref") else None
    return {**message_json(info), "url": url}


async def session_images(request: Request) -> Response:
    """`GET /api/v1/sessions/{id}/images`: every image and document, and the totals."""
    gateway = request.app.state.gateway
    caller = gateway.caller(request)
    listing = await gateway.history(caller.token).list_images(request.path_params["session_id"])
    body = {
        "images": [image_json(gateway, i, caller.principal) for i in listing.images],
        "totals": message_json(listing.totals),
    }
    return Response(orjson.dumps(body), media_type="application/json")


async def slim_download(request: Request) -> Response:
    """`GET /api/v1/sessions/{id}/slim`: the slim copy as a download, streamed."""
    gateway = request.app.state.gateway
    caller = gateway.caller(request)
    images = request.query_params.get("images", "text")
    if images not in ("text", "downscale"):
        raise HttpError(400, "INVALID_ARGUMENT")
    stream = gateway.history(caller.token).slim_session(
        request.path_params["session_id"],
        downscale=images == "downscale",
        include_subagents=False,
    )
    first = await anext(stream)  # the header: errors surface here, before the answer starts
    name = f"{first.header.session_id}.slim.jsonl"

    async def body() -> AsyncIterator[bytes]:
        try:
            async for message in stream:
                if message.HasField("data"):
                    yield message.data
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()  # cancels the call when the download is cut short

    headers = {**DOWNLOAD_HEADERS, "Content-Disposition": f'attachment; filename="{name}"'}
    return StreamingResponse(body(), media_type="application/x-ndjson", headers=headers)
