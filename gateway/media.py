"""Photos over HTTP: signature check, conditional and range requests, streamed ReadMedia bytes.

A photo GET is `/api/v1/media/<ref>?pin=&p=&exp=&sig=`, plus `size=96|320|960` for
a thumbnail of that longest side (ReadMedia's `size`; any other value is 400).
The size is outside the signature: a grant to a ref is a grant to its
thumbnails, which show nothing the original does not. The signature must be
valid for (ref, pin, p, exp) and unexpired; a request that also carries a
bearer token must be from principal `p`. A bearer request without a signature
is allowed too (API clients), and its token is passed through. A signed
request reads with the gateway's own token, a delegate acting for the URL's
principal (`scrollback-on-behalf-of`, scrollback.server.auth): the media
service reads as that principal, with its projects, and counts the stream
against its budget of concurrent calls, never against one all users share.
Downloads open at once are bounded per grant and per client address
(gateway.downloads; 429 over a bound).

Answers carry the sniffed `Content-Type` (anything not safe inline is
`application/octet-stream` with `Content-Disposition: attachment`), `ETag`
(the sha256), `Cache-Control: private, max-age=31536000, immutable`,
`X-Content-Type-Options: nosniff` and `Content-Security-Policy: sandbox;
default-src 'none'`. `If-None-Match` -> 304; one `Range` -> 206 mapped onto
read_offset / read_limit, or 416. Bytes go out chunk by chunk as ReadMedia
sends them, in chunks of PHOTO_CHUNK_BYTES (ReadMediaRequest.chunk_size;
QUIET_CHUNK_BYTES while at most QUIET_DOWNLOADS downloads are open), each
a view into its gRPC message handed to uvicorn uncopied; uvicorn's flow
control and gRPC's keep at most a few chunks in the gateway whatever the
photo's size.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from client.aio import AsyncMediaClient, AsyncMediaStream
from client.errors import InvalidArgument, OutOfRange
from gateway.downloads import DownloadLimits
from gateway.errors import HttpError
from gateway.signing import SignatureError, UrlSigner
from scrollback.contract.refs import BlobRef, RefError, parse_ref, validate_pin
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.ref.v1 import ref_pb2
from scrollback.server.auth import TokenTable


class Asker(Protocol):
    """Who asks: the principal ("" without auth) and the token to pass on."""

    @property
    def principal(self) -> str: ...

    @property
    def token(self) -> str | None: ...


class PhotoAccess(Protocol):
    """What serving a photo needs of the gateway: who asks, signed grants, media reads."""

    @property
    def tokens(self) -> TokenTable | None: ...

    @property
    def signer(self) -> UrlSigner: ...

    @property
    def service_token(self) -> str | None: ...

    @property
    def downloads(self) -> DownloadLimits: ...

    def caller(self, request: Request) -> Asker:
        """The caller of a request (401 when its token is bad)."""

    def media(self, token: str | None, *, acting_for: str | None = None) -> AsyncMediaClient:
        """A media client that calls with `token`, acting for a principal when given."""


# The chunk size photos are read in (ReadMediaRequest.chunk_size): fewer messages cost
# both ends less CPU, larger ones more memory per open download (a few chunks each).
PHOTO_CHUNK_BYTES = 128 * 1024
# While few downloads are open, larger chunks: their extra memory is a few of these each.
QUIET_CHUNK_BYTES = 256 * 1024
QUIET_DOWNLOADS = 4
CACHE_CONTROL = "private, max-age=31536000, immutable"
CSP = "sandbox; default-src 'none'"
_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
# ReadMedia's read_offset and read_limit are int64: a position past it is past any photo.
INT64_MAX = 2**63 - 1


class RangeTooLargeError(Exception):
    """A `Range` with a position past int64: no photo is that large (416)."""


def _selector(ref_text: str, pin: str) -> mpb.MediaSelector:
    """The selector of a ref string; HttpError 400 when malformed."""
    try:
        ref = parse_ref(ref_text)
        if isinstance(ref, BlobRef):
            if pin:
                raise HttpError(400, "INVALID_ARGUMENT")
            return mpb.MediaSelector(blob_ref=str(ref))
        media_ref = ref_pb2.MediaRef(
            session_id=ref.session_id,
            entry_uuid=ref.entry_uuid,
            index=ref.index,
            pin=validate_pin(pin),
        )
    except RefError:
        raise HttpError(400, "INVALID_ARGUMENT") from None
    return mpb.MediaSelector(media_ref=media_ref)


# The thumbnail sizes a photo URL may ask for (ReadMedia's ThumbnailSize, in pixels).
THUMBNAIL_SIZES = {"96": 96, "320": 320, "960": 960}


def _size(request: Request) -> int | None:
    """The thumbnail size asked for; None for the original; HttpError 400 for another value."""
    if "size" not in request.query_params:
        return None
    size = THUMBNAIL_SIZES.get(request.query_params["size"])
    if size is None:
        raise HttpError(400, "INVALID_ARGUMENT")
    return size


def _position(digits: str) -> int | None:
    """A range position (None when absent); RangeTooLargeError past int64."""
    if not digits:
        return None
    # Counted before int(): a number of thousands of digits is refused, not parsed.
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(INT64_MAX)) or int(significant) > INT64_MAX:
        raise RangeTooLargeError
    return int(significant)


def _parse_range(header: str) -> tuple[int | None, int | None] | None:
    """(first, last) of a single `bytes=` range; (None, n) is a suffix; None: not one range.

    RangeTooLargeError when a position is past int64.
    """
    match = _RANGE.fullmatch(header.strip())
    if match is None or (not match.group(1) and not match.group(2)):
        return None
    first = _position(match.group(1))
    last = _position(match.group(2))
    if first is not None and last is not None and last < first:
        return None
    return first, last


def _etag_matches(header: str, sha256: str) -> bool:
    if header.strip() == "*":
        return True
    tags = [tag.strip().removeprefix("W/").strip('"') for tag in header.split(",")]
    return sha256 in tags


def _headers(metadata: mpb.MediaMetadata) -> dict[str, str]:
    headers = {
        "ETag": f'"{metadata.sha256}"',
        "Cache-Control": CACHE_CONTROL,
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": CSP,
        "Accept-Ranges": "bytes",
    }
    if metadata.safe_inline:
        headers["Content-Type"] = metadata.content_type
    else:
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Disposition"] = "attachment"
    return headers


def _unsatisfiable(size: int) -> Response:
    return Response(
        status_code=416,
        headers={"Content-Range": f"bytes */{size}", "X-Content-Type-Options": "nosniff"},
    )


@dataclass(frozen=True, slots=True)
class _Reader:
    """Whom a photo is read for: the token to call with, the principal it acts for, the grant."""

    token: str | None
    # The principal the gateway's delegate token names (None: the token's own).
    acting_for: str | None
    # The principal the read counts for ("" without auth), keying the per-URL bound.
    principal: str


def _reader(gateway: PhotoAccess, request: Request, ref: str, pin: str) -> _Reader:
    """Whom to read for, after checking the signature or the bearer token."""
    params = request.query_params
    signature = params.get("sig", "")
    bearer = request.headers.get("authorization") if gateway.tokens is not None else None
    if bearer and not signature:
        caller = gateway.caller(request)  # pass-through; 401 when bad
        return _Reader(caller.token, None, caller.principal)
    try:
        grant = gateway.signer.check(
            ref, pin, params.get("p", ""), params.get("exp", ""), signature
        )
    except SignatureError:
        raise HttpError(403, "PERMISSION_DENIED") from None
    if bearer and gateway.caller(request).principal != grant.principal:
        raise HttpError(403, "PERMISSION_DENIED")
    if gateway.service_token is None:
        return _Reader(None, None, grant.principal)  # no auth: no principals
    if not grant.principal:
        raise HttpError(403, "PERMISSION_DENIED")  # signed by a gateway without auth
    # The gateway's own token acts for the URL's principal: the media service
    # applies that principal's projects and counts the stream against its budget.
    return _Reader(gateway.service_token, grant.principal, grant.principal)


class _DownloadResponse(Response):
    """A streamed photo that gives its download place back when it ends, however it ends.

    A plain ASGI response: each chunk goes from the media stream to the
    connection as it came (a view into its gRPC message), one `send` each.
    A watcher of `receive` ends the media stream when the browser leaves,
    since uvicorn's `send` then returns without writing.
    """

    def __init__(
        self,
        stream: AsyncMediaStream,
        release: Callable[[], None],
        *,
        status_code: int,
        headers: dict[str, str],
    ) -> None:
        super().__init__(status_code=status_code, headers=headers)
        self._stream = stream
        self._release = release
        self._left = False

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._left = True
        self._stream.cancel()  # the pending read ends at once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.create_task(self._watch(receive))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            while (chunk := await self._stream.read()) is not None:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._left or (task is not None and task.cancelling()):
                raise
        finally:
            watcher.cancel()
            self._stream.cancel()  # the browser left: the media stream ends now
            self._release()


async def serve_media(gateway: PhotoAccess, request: Request, ref: str) -> Response:
    """Answer one photo GET (or HEAD), within the open-download bounds (gateway.downloads)."""
    pin = request.query_params.get("pin", "")
    selector = _selector(ref, pin)
    size = _size(request)
    reader = _reader(gateway, request, ref, pin)
    client = gateway.media(reader.token, acting_for=reader.acting_for)
    address = request.client.host if request.client is not None else ""
    release = gateway.downloads.open("\x1f".join((reader.principal, ref, pin)), address)
    try:
        quiet = gateway.downloads.open_count <= QUIET_DOWNLOADS
        chunk = QUIET_CHUNK_BYTES if quiet else PHOTO_CHUNK_BYTES
        response = await _answer(client, request, selector, size, release, chunk)
    except BaseException:
        release()
        raise
    if not isinstance(response, _DownloadResponse):
        release()
    return response


async def _answer(
    client: AsyncMediaClient,
    request: Request,
    selector: mpb.MediaSelector,
    size: int | None,
    release: Callable[[], None],
    chunk: int,
) -> Response:
    try:
        wanted = (
            _parse_range(request.headers.get("range", "")) if "range" in request.headers else None
        )
    except RangeTooLargeError:
        (result,) = await client.stat_media([selector], size=size)
        if result.WhichOneof("result") != "metadata":
            raise HttpError(404, "NOT_FOUND") from None
        return _unsatisfiable(result.metadata.size_bytes)

    first, last = wanted if wanted is not None else (0, None)
    if first is None:
        # A suffix range needs the size before the offset: ask StatMedia (cached by the service).
        (result,) = await client.stat_media([selector], size=size)
        if result.WhichOneof("result") != "metadata":
            raise HttpError(404, "NOT_FOUND")
        total = result.metadata.size_bytes
        first, last = max(0, total - (last or 0)), total - 1
        if total == 0:
            return _unsatisfiable(0)
    limit = 0 if last is None else last - first + 1
    try:
        stream = await client.open_media(
            selector, read_offset=first, read_limit=limit, size=size, chunk_size=chunk
        )
    except (OutOfRange, InvalidArgument) as error:
        if wanted is None or isinstance(error, InvalidArgument):
            raise
        (result,) = await client.stat_media([selector], size=size)
        return _unsatisfiable(result.metadata.size_bytes)
    try:
        metadata = stream.metadata
        headers = _headers(metadata)
        if _etag_matches(request.headers.get("if-none-match", ""), metadata.sha256):
            stream.cancel()
            headers.pop("Content-Type", None)
            headers.pop("Content-Disposition", None)
            return Response(status_code=304, headers=headers)
        total = metadata.size_bytes
        status = 200
        if wanted is not None:
            if first >= total:
                stream.cancel()
                return _unsatisfiable(total)
            end = total - 1 if last is None else min(last, total - 1)
            headers["Content-Range"] = f"bytes {first}-{end}/{total}"
            headers["Content-Length"] = str(end - first + 1)
            status = 206
        else:
            headers["Content-Length"] = str(total)
        if request.method == "HEAD":
            stream.cancel()
            return Response(status_code=status, headers=headers)
    except BaseException:
        stream.cancel()
        raise
    return _DownloadResponse(stream, release, status_code=status, headers=headers)
