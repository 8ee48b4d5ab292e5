"""The gateway's ASGI app: JSON API, photos, live events and the viewer.

Every body is the proto's canonical JSON mapping (`message_json`, docs/contract.md §5; the bodies per
route in §12), the gateway adding only a signed `url` beside each media ref and attachment.

Routes (the fixed names of docs/contract.md §12 first):
- `GET /api/v1/sessions?page_size=&page_token=&project=`: `{"sessions": [...], "nextPageToken"}`;
- `GET /api/v1/sessions/{id}`: one session with its insight (GetSession): entries by type,
  photos, time span, token usage and cost per model and in total, sub-agent totals;
- `GET /api/v1/sessions/{id}/window?page_token=&direction=latest_first|oldest_first&page_size=`:
  `{"entries": [...], "nextPageToken", ...}`, each of `mediaRefs` with a signed `url`;
- `GET /api/v1/sessions/{id}/bootstrap?page_size=`: pending messages, watch position, latest window;
- `POST /api/v1/sessions/{id}/messages` (JSON `text`, `client_txn_id`, `attachments`): accept;
- `GET /api/v1/sessions/{id}/events?position=`: WatchSession as Server-Sent Events, each `id:`
  the position after it, so `Last-Event-ID` resumes with no gap and no duplicate;
- `GET /api/v1/media/{ref}?pin=&p=&exp=&sig=&size=`: one photo, streamed, or its thumbnail
  with `size=96|320|960` (see gateway.media);
- `GET /api/v1/search?q=&project=&session=&type=&role=&since=&until=&photos=with|without&page_size=&page_token=&order=relevance|newest`:
  `{"hits": [...], "nextPageToken", "partial"}`, most relevant first unless `order=newest`, each hit with its snippet, highlights and the
  `windowPageToken` that opens the session's window at it;
- `GET /` and `GET /sessions/{id}`: the viewer; `/static/...` its scripts (render.js draws the
  entries, vendor/ holds marked, DOMPurify and highlight.js) and style.

Every gRPC call goes through `client.aio` on two channels opened at start-up (TLS
as the CLI's SCROLLBACK_TLS_* say, gateway.links); the caller's bearer token is
passed through per call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import grpc
import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from client import Window
from client.aio import AsyncHistoryClient, AsyncMediaClient
from client.errors import ScrollbackError
from gateway.config import GatewayConfig
from gateway.downloads import DownloadLimits
from gateway.errors import HttpError, error_response, http_status
from gateway.hosts import HostGuard
from gateway.links import HandshakeLog, open_channel
from gateway.media import serve_media
from gateway.rescue import session_images, slim_download
from gateway.signing import UrlSigner
from scrollback.contract.proto_json import message_json
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.ref.v1 import ref_pb2
from scrollback.search.v1 import search_pb2 as spb
from scrollback.server.auth import ON_BEHALF_OF, TokenTable

log = logging.getLogger("scrollback.gateway")
STATIC = Path(__file__).parent / "static"
MEDIA_PREFIX = "/api/v1/media/"
# The viewer page loads only its own script, style and photos.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the principal name ("" without auth) and the token to pass on."""

    principal: str
    token: str | None


class Gateway:
    """The app's state: configuration, signer, token table and the two service channels."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.signer = UrlSigner(config.signing_key(), config.url_ttl_seconds)
        self.tokens: TokenTable | None = config.token_table()
        self.service_token = config.service_token()
        self.downloads = DownloadLimits(
            config.max_downloads_per_url, config.max_downloads_per_client
        )
        self._history_channel: grpc.aio.Channel | None = None
        self._media_channel: grpc.aio.Channel | None = None
        # Per service address (both services may share one).
        self.handshakes = {
            config.media_addr: HandshakeLog("media", config.media_addr, config.tls),
            config.history_addr: HandshakeLog("history", config.history_addr, config.tls),
        }

    async def open(self) -> None:
        """Open the channels (in the serving loop) and check, in the background, that TLS
        lets them talk (gateway.links)."""
        tls = self.config.tls
        self._history_channel = open_channel(self.config.history_addr, tls)
        # No BDP probing: the receive window stays at its initial size, so a photo
        # stream buffers a bounded amount in the gateway whatever the photo's size
        # (the HTTP side drains it at the browser's pace); a larger fixed window
        # would be held by every slow download at once (docs/benchmarks.md "The gateway").
        self._media_channel = open_channel(
            self.config.media_addr, tls, [("grpc.http2.bdp_probe", 0)]
        )
        for handshakes in self.handshakes.values():
            handshakes.check()

    async def close(self) -> None:
        """Close the channels."""
        for handshakes in self.handshakes.values():
            await handshakes.close()
        for channel in (self._history_channel, self._media_channel):
            if channel is not None:
                await channel.close(None)

    def unavailable(self, error: ScrollbackError) -> None:
        """A call ended UNAVAILABLE: have the log say why, when TLS is the cause."""
        named = self.handshakes.get(error.addr)
        for handshakes in [named] if named is not None else self.handshakes.values():
            handshakes.check(error.message)

    def caller(self, request: Request) -> Caller:
        """The caller of a request; HttpError 401 when auth is on and the token is bad."""
        if self.tokens is None:
            return Caller("", None)
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        principal = self.tokens.lookup(token) if scheme.lower() == "bearer" and token else None
        if principal is None:
            raise HttpError(401, "UNAUTHENTICATED")
        return Caller(principal.name, token)

    @staticmethod
    def _metadata(token: str | None) -> tuple[tuple[str, str], ...]:
        # Set explicitly: the client would otherwise fall back to SCROLLBACK_TOKEN.
        return (("authorization", f"Bearer {token}"),) if token else ()

    def history(self, token: str | None) -> AsyncHistoryClient:
        """A history client on the shared channel, calling with `token`."""
        client = AsyncHistoryClient(self.config.history_addr, channel=self._history_channel)
        client.metadata = self._metadata(token)
        return client

    def media(self, token: str | None, *, acting_for: str | None = None) -> AsyncMediaClient:
        """A media client on the shared channel, calling with `token` (a delegate's, acting for
        principal `acting_for`, when given)."""
        client = AsyncMediaClient(self.config.media_addr, channel=self._media_channel)
        metadata = self._metadata(token)
        if acting_for is not None:
            metadata = (*metadata, (ON_BEHALF_OF, acting_for))
        client.metadata = metadata
        return client

    def media_url(self, ref: str, pin: str, principal: str) -> str:
        """The signed URL of one photo for `principal`."""
        expires, signature = self.signer.sign(ref, pin, principal)
        query = urlencode({"pin": pin, "p": principal, "exp": expires, "sig": signature})
        return f"{MEDIA_PREFIX}{quote(ref, safe='/:')}?{query}"

    # JSON shapes: the proto's canonical JSON mapping (message_json), plus the gateway's `url`s.

    def ref_json(self, ref: ref_pb2.MediaRef, principal: str) -> dict[str, Any]:
        """One MediaRef in the canonical mapping, with its signed `url` beside its fields."""
        return {**message_json(ref), "url": self.media_url(ref.uri, ref.pin, principal)}

    def entry_json(self, entry: hpb.Entry, principal: str) -> dict[str, Any]:
        """One Entry in the canonical mapping (the line as the string `json`), each of its
        `mediaRefs` with a signed `url`."""
        body = message_json(entry)
        body["mediaRefs"] = [self.ref_json(ref, principal) for ref in entry.media_refs]
        return body

    def accepted_json(self, message: hpb.AcceptedMessage, principal: str) -> dict[str, Any]:
        """One AcceptedMessage in the canonical mapping, each attachment with a signed `url`."""
        body = message_json(message)
        body["attachments"] = [
            {**message_json(a), "url": self.media_url(a.ref, "", principal)}
            for a in message.attachments
        ]
        return body


def _window_end(window: Window) -> hpb.WindowEnd:
    """The WindowEnd fields of an assembled window, as the message they came in."""
    return hpb.WindowEnd(
        next_page_token=window.next_page_token,
        skipped_lines=window.skipped_lines,
        file_size_bytes=window.file_size_bytes,
    )


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


# The services' integer query fields (page_size) are int32.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _int_param(params: Mapping[str, str], name: str) -> int:
    """An int32 query parameter (0 when absent); HttpError 400 when malformed or out of range."""
    text = params.get(name, "")
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:  # also a number too long for int() to parse
        raise HttpError(400, "INVALID_ARGUMENT") from None
    if not INT32_MIN <= value <= INT32_MAX:
        raise HttpError(400, "INVALID_ARGUMENT")
    return value


def _direction(params: Mapping[str, str]) -> bool:
    """True for oldest first."""
    value = params.get("direction", "") or "latest_first"
    if value not in ("latest_first", "oldest_first"):
        raise HttpError(400, "INVALID_ARGUMENT")
    return value == "oldest_first"


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


def _errors(handler: Any) -> Any:
    """Turn HttpError and typed client errors into JSON error answers."""

    async def wrapped(request: Request) -> Response:
        try:
            response: Response = await handler(request)
        except HttpError as error:
            headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else error.headers
            return error_response(error.status, error.code, headers, error.message)
        except ScrollbackError as error:
            status = http_status(error.code)
            if error.code == grpc.StatusCode.UNAVAILABLE:
                _gateway(request).unavailable(error)
            headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            return error_response(status, error.code_name, headers, reason=error.reason)
        return response

    return wrapped


async def list_sessions(request: Request) -> Response:
    gateway = _gateway(request)
    caller = gateway.caller(request)
    params = request.query_params
    page = await gateway.history(caller.token).list_sessions(
        page_size=_int_param(params, "page_size"),
        page_token=params.get("page_token", ""),
        project_dir=params.get("project", ""),
    )
    return _json(message_json(page))


async def get_session(request: Request) -> Response:
    """`GET /api/v1/sessions/{id}`: GetSession, the session and its insight."""
    gateway = _gateway(request)
    caller = gateway.caller(request)
    s = await gateway.history(caller.token).get_session(request.path_params["session_id"])
    return _json(message_json(s))


async def read_window(request: Request) -> Response:
    gateway = _gateway(request)
    caller = gateway.caller(request)
    params = request.query_params
    window = await gateway.history(caller.token).read_window(
        request.path_params["session_id"],
        page_size=_int_param(params, "page_size"),
        page_token=params.get("page_token", ""),
        oldest_first=_direction(params),
    )
    return _json(
        {
            "entries": [gateway.entry_json(e, caller.principal) for e in window.entries],
            **message_json(_window_end(window)),
        }
    )


def _moment(params: Mapping[str, str], name: str) -> datetime | None:
    """An ISO 8601 query parameter (naive: UTC), None when absent."""
    text = params.get(name, "")
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
        # In UTC now: a moment whose offset takes it past year 1 or 9999 is refused here.
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise HttpError(400, "INVALID_ARGUMENT") from None


def _photos(params: Mapping[str, str]) -> bool | None:
    value = params.get("photos", "")
    if value not in ("", "with", "without"):
        raise HttpError(400, "INVALID_ARGUMENT")
    return None if not value else value == "with"


async def search(request: Request) -> Response:
    """`GET /api/v1/search?q=`: SearchService/Search, one page of hits."""
    gateway = _gateway(request)
    caller = gateway.caller(request)
    params = request.query_params
    page = await gateway.history(caller.token).search(
        params.get("q", ""),
        project_dir=params.get("project", ""),
        session_id=params.get("session", ""),
        entry_types=params.getlist("type"),
        roles=params.getlist("role"),
        start_time=_moment(params, "since"),
        end_time=_moment(params, "until"),
        photos=_photos(params),
        page_size=_int_param(params, "page_size"),
        page_token=params.get("page_token", ""),
        newest=_newest(params),
    )
    hits = [message_json(hit) for hit in page.hits]
    end = spb.SearchEnd(next_page_token=page.next_page_token, partial=page.partial)
    return _json({"hits": hits, **message_json(end)})


def _newest(params: Any) -> bool:
    """`order=relevance` (the default) or `order=newest`; anything else is 400."""
    value = params.get("order", "")
    if value not in ("", "relevance", "newest"):
        raise HttpError(400, "INVALID_ARGUMENT")
    return bool(value == "newest")


async def bootstrap(request: Request) -> Response:
    gateway = _gateway(request)
    caller = gateway.caller(request)
    window = await gateway.history(caller.token).bootstrap(
        request.path_params["session_id"], page_size=_int_param(request.query_params, "page_size")
    )
    header = window.header or hpb.BootstrapHeader()
    return _json(
        {
            **message_json(header),
            "pending": [gateway.accepted_json(m, caller.principal) for m in header.pending],
            "entries": [gateway.entry_json(e, caller.principal) for e in window.entries],
            **message_json(_window_end(window)),
        }
    )


async def accept_message(request: Request) -> Response:
    gateway = _gateway(request)
    caller = gateway.caller(request)
    # JSON only: a cross-site form cannot send it without a CORS preflight, which fails.
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HttpError(415, "UNSUPPORTED_MEDIA_TYPE")
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise HttpError(400, "INVALID_ARGUMENT") from None
    if not isinstance(body, dict) or not isinstance(body.get("text", ""), str):
        raise HttpError(400, "INVALID_ARGUMENT")
    raw_attachments = body.get("attachments", [])
    if not isinstance(raw_attachments, list) or not all(
        isinstance(a, dict) and isinstance(a.get("ref"), str) for a in raw_attachments
    ):
        raise HttpError(400, "INVALID_ARGUMENT")
    attachments = [
        hpb.Attachment(
            ref=a["ref"], name=str(a.get("name", "")), media_type=str(a.get("media_type", ""))
        )
        for a in raw_attachments
    ]
    txn_id = body.get("client_txn_id")
    response = await gateway.history(caller.token).accept_message(
        body.get("text", ""),
        session_id=request.path_params["session_id"],
        attachments=attachments,
        txn_id=txn_id if isinstance(txn_id, str) and txn_id else None,
    )
    return _json(
        {
            **message_json(response),
            "message": gateway.accepted_json(response.message, caller.principal),
        }
    )


async def events(request: Request) -> Response:
    gateway = _gateway(request)
    caller = gateway.caller(request)
    session_id = request.path_params["session_id"]
    # The browser's EventSource resends the last id it saw: that wins over ?position=.
    position = request.headers.get("last-event-id") or request.query_params.get("position", "")
    history = gateway.history(caller.token)

    async def stream() -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"
        try:
            async for event in history.watch(session_id, position, heartbeats=True):
                if event.kind == "entry" and event.entry is not None:
                    data = gateway.entry_json(event.entry, caller.principal)
                elif event.kind == "accepted" and event.accepted is not None:
                    data = gateway.accepted_json(event.accepted, caller.principal)
                else:
                    data = {}
                yield (
                    f"id: {event.position}\nevent: {event.kind}\ndata: ".encode()
                    + orjson.dumps(data)
                    + b"\n\n"
                )
        except ScrollbackError as error:
            # The status line is long gone: the error is the stream's last event.
            if error.code == grpc.StatusCode.UNAVAILABLE:
                gateway.unavailable(error)
            status = http_status(error.code)
            body = {"status": status, "code": error.code_name, "reason": error.reason}
            yield b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "X-Content-Type-Options": "nosniff",
        },
    )


async def media(request: Request) -> Response:
    gateway = _gateway(request)
    return await serve_media(gateway, request, request.path_params["ref"])


async def viewer(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)


def create_app(config: GatewayConfig) -> Starlette:
    """The ASGI app of a configuration (channels open in its lifespan)."""
    gateway = Gateway(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.open()
        try:
            yield
        finally:
            await gateway.close()

    routes = [
        Route("/api/v1/sessions", _errors(list_sessions)),
        Route("/api/v1/search", _errors(search)),
        Route("/api/v1/sessions/{session_id}", _errors(get_session)),
        Route("/api/v1/sessions/{session_id}/window", _errors(read_window)),
        Route("/api/v1/sessions/{session_id}/bootstrap", _errors(bootstrap)),
        Route("/api/v1/sessions/{session_id}/messages", _errors(accept_message), methods=["POST"]),
        Route("/api/v1/sessions/{session_id}/events", _errors(events)),
        Route("/api/v1/sessions/{session_id}/images", _errors(session_images)),
        Route("/api/v1/sessions/{session_id}/slim", _errors(slim_download)),
        Route(MEDIA_PREFIX + "{ref:path}", _errors(media), methods=["GET", "HEAD"]),
        Route("/", viewer),
        Route("/sessions/{session_id}", viewer),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    # The Host rule comes first: a rebinding page gets nothing, not even the viewer.
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(HostGuard, rule=config.host_rule())],
    )
    app.state.gateway = gateway
    return app
