"""The logic the sync and asyncio clients share: retry policy, stream reassembly, refs, uploads.

Nothing here does I/O on a channel: `client.history`/`client.media` (sync) and
`client.aio` (asyncio) drive the calls and feed the messages through the
assemblers below, so both flavours page, reassemble chunks, resume watches and
verify media the same way.
"""

from __future__ import annotations

import hashlib
import ipaddress
import mimetypes
import os
import random
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import grpc

from client.errors import DataLoss, InvalidArgument
from scrollback.contract.refs import RefError, parse_ref, validate_pin
from scrollback.contract.sniff import OCTET_STREAM, SNIFF_BYTES, sniff
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.ref.v1 import ref_pb2

HISTORY_ADDR_ENV = "SCROLLBACK_HISTORY_ADDR"
MEDIA_ADDR_ENV = "SCROLLBACK_MEDIA_ADDR"
TOKEN_ENV = "SCROLLBACK_TOKEN"
DEFAULT_HISTORY_ADDR = "127.0.0.1:50051"
DEFAULT_MEDIA_ADDR = "127.0.0.1:50052"
# Room for a 256 KiB media chunk or a 4 MiB window message, as the servers send.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    ("grpc.max_send_message_length", 4 * 1024 * 1024),
)
UPLOAD_CHUNK = 1024 * 1024
# The max_batch_bytes the client asks windows in: runs of small entries come
# in EntryBatch messages of up to 1 MiB (the server's cap), far fewer messages.
WINDOW_BATCH_BYTES = 1024 * 1024
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def channel_target(addr: str) -> tuple[str, list[tuple[str, Any]]]:
    """The gRPC target and channel options for an address, or several.

    `HOST:PORT` is used as is; `IP:PORT,IP:PORT,...` (several replicas, IP
    literals) becomes one `ipv4:`/`ipv6:` target. Either way calls are spread
    over every address the target resolves to with the `round_robin` policy, so
    a DNS name with one record per replica balances too.
    """
    options: list[tuple[str, Any]] = [*CHANNEL_OPTIONS, ("grpc.lb_policy_name", "round_robin")]
    parts = [part.strip() for part in addr.split(",") if part.strip()]
    if len(parts) <= 1:
        return (parts[0] if parts else addr), options
    hosts = [part.rpartition(":")[0].strip("[]") for part in parts]
    try:
        families = {ipaddress.ip_address(host).version for host in hosts}
    except ValueError:
        raise InvalidArgument(
            "several addresses must be IP:PORT literals; for host names use one DNS name "
            "that resolves to every replica"
        ) from None
    if len(families) != 1:
        raise InvalidArgument("several addresses must be all IPv4 or all IPv6")
    scheme = "ipv4" if families == {4} else "ipv6"
    return f"{scheme}:{','.join(parts)}", options


def history_addr(explicit: str | None = None) -> str:
    """The history address: explicit, else SCROLLBACK_HISTORY_ADDR, else 127.0.0.1:50051."""
    return explicit or os.environ.get(HISTORY_ADDR_ENV) or DEFAULT_HISTORY_ADDR


def media_addr(explicit: str | None = None) -> str:
    """The media address: explicit, else SCROLLBACK_MEDIA_ADDR, else 127.0.0.1:50052."""
    return explicit or os.environ.get(MEDIA_ADDR_ENV) or DEFAULT_MEDIA_ADDR


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter, for idempotent calls only.

    Attempt n (0-based) that failed with a code in `retry_codes` waits
    `min(max_backoff, initial_backoff * multiplier**n)` scaled by a random
    factor in `[1 - jitter, 1]`, then tries again, up to `max_attempts` in all.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    retry_codes: frozenset[grpc.StatusCode] = RETRYABLE_CODES

    def retryable(self, code: grpc.StatusCode | None) -> bool:
        """True when a failure with this code may be retried."""
        return code in self.retry_codes

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the failed attempt number `attempt` (0-based)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier**attempt)
        factor = 1.0 - self.jitter * (rng or random).random()
        return max(0.0, cap * factor)


NO_RETRY = RetryPolicy(max_attempts=1)
DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Per-attempt deadlines in seconds (None: no deadline)."""

    unary: float | None = 10.0
    stream: float | None = 60.0


DEFAULT_DEADLINES = Deadlines()


def call_metadata(
    metadata: Iterable[tuple[str, str]], token: str | None = None
) -> tuple[tuple[str, str], ...]:
    """The metadata sent with every call: the given pairs plus `authorization: Bearer <token>`."""
    pairs = tuple(metadata)
    token = token or os.environ.get(TOKEN_ENV) or None
    return (*pairs, ("authorization", f"Bearer {token}")) if token else pairs


def rpc_code(error: BaseException) -> grpc.StatusCode | None:
    """The status code of a grpc error, or None for other exceptions."""
    if isinstance(error, grpc.RpcError):
        code = getattr(error, "code", None)
        if callable(code):
            value = code()
            if isinstance(value, grpc.StatusCode):
                return value
    return None


@dataclass(slots=True)
class Window:
    """One page of a session: whole entries in file order, and the WindowEnd fields."""

    entries: list[hpb.Entry]
    next_page_token: str
    skipped_lines: int
    file_size_bytes: int
    header: hpb.BootstrapHeader | None = None


class WindowAssembler:
    """Feeds ReadWindow or Bootstrap messages; unpacks EntryBatches, joins EntryJsonChunks."""

    def __init__(self) -> None:
        self.header: hpb.BootstrapHeader | None = None
        self.entries: list[hpb.Entry] = []
        self.end: hpb.WindowEnd | None = None

    def feed(self, message: hpb.ReadWindowResponse | hpb.BootstrapResponse) -> None:
        """Take one stream message."""
        item = message.WhichOneof("item")
        if item == "header":
            assert isinstance(message, hpb.BootstrapResponse)
            self.header = message.header
        elif item == "entry":
            self.entries.append(message.entry)
        elif item == "entries":
            self.entries.extend(message.entries.entries)
        elif item == "entry_json_chunk":
            chunk = message.entry_json_chunk
            if not self.entries or self.entries[-1].byte_offset != chunk.byte_offset:
                raise DataLoss("a json chunk does not continue the entry before it")
            self.entries[-1].json += chunk.json_part
        elif item == "end":
            self.end = message.end

    def window(self) -> Window:
        """The finished page; DataLoss if the stream ended early."""
        if self.end is None:
            raise DataLoss("the window stream ended without its WindowEnd")
        for entry in self.entries:
            if len(entry.json.encode()) != entry.json_size_bytes:
                raise DataLoss("an entry's json is incomplete")
        return Window(
            self.entries,
            self.end.next_page_token,
            self.end.skipped_lines,
            self.end.file_size_bytes,
            self.header,
        )


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One complete event of a watch: a whole entry, an accepted message or a heartbeat."""

    kind: Literal["entry", "accepted", "heartbeat"]
    position: str
    entry: hpb.Entry | None = None
    accepted: hpb.AcceptedMessage | None = None


class WatchAssembler:
    """Turns WatchSession messages into whole events; tracks the resume position.

    `position` is the position after the last *complete* event, so resuming
    from it after a dropped stream neither repeats nor loses anything, even
    when the stream broke between an entry and its json chunks.
    """

    def __init__(self, position: str = "") -> None:
        self.position = position
        self._partial: hpb.Entry | None = None
        self._partial_position = ""

    def feed(self, message: hpb.WatchSessionResponse) -> WatchEvent | None:
        """Take one stream message; return an event once it is complete."""
        kind = message.WhichOneof("event")
        if kind == "entry_json_chunk":
            chunk = message.entry_json_chunk
            if self._partial is None or self._partial.byte_offset != chunk.byte_offset:
                raise DataLoss("a json chunk does not continue the entry before it")
            self._partial.json += chunk.json_part
            if message.position:
                self._partial_position = message.position
            return self._finish_entry()
        self._partial = None
        if kind == "entry":
            self._partial = message.entry
            self._partial_position = message.position
            return self._finish_entry()
        if kind == "accepted":
            return self._emit(WatchEvent("accepted", message.position, accepted=message.accepted))
        if kind == "heartbeat":
            return self._emit(WatchEvent("heartbeat", message.position))
        return None

    def reset(self) -> None:
        """Forget a half-received entry (the stream broke)."""
        self._partial = None

    def _finish_entry(self) -> WatchEvent | None:
        entry = self._partial
        if entry is None or len(entry.json.encode()) < entry.json_size_bytes:
            return None
        self._partial = None
        return self._emit(WatchEvent("entry", self._partial_position, entry=entry))

    def _emit(self, event: WatchEvent) -> WatchEvent:
        if event.position:
            self.position = event.position
        return event


def media_selector(target: str, pin: str | None = None) -> mpb.MediaSelector:
    """A MediaSelector from `<session>/<uuid>/<index>` plus pin, or `media:<sha256>`.

    Raises InvalidArgument (client-side, no call made) for anything else, or a
    transcript ref without a valid pin.
    """
    try:
        parsed = parse_ref(target)
    except RefError as error:
        raise InvalidArgument(str(error)) from None
    if target.startswith("media:"):
        return mpb.MediaSelector(blob_ref=target)
    if not pin:
        raise InvalidArgument("a transcript image reference needs its pin (--pin)")
    try:
        validate_pin(pin)
    except RefError as error:
        raise InvalidArgument(str(error)) from None
    session_id, entry_uuid, index = str(parsed).split("/")
    return mpb.MediaSelector(
        media_ref=ref_pb2.MediaRef(
            session_id=session_id, entry_uuid=entry_uuid, index=int(index), pin=pin
        )
    )


def selector_of(
    ref: ref_pb2.MediaRef | mpb.MediaSelector | str, pin: str | None = None
) -> mpb.MediaSelector:
    """A selector from a MediaRef message (as ReadWindow returns), a selector or a string form."""
    if isinstance(ref, mpb.MediaSelector):
        return ref
    if isinstance(ref, str):
        return media_selector(ref, pin)
    # Every field of the ref travels (the line offset hint above all: it spares the
    # media service a search); the output-only ones are ignored by the server.
    copy = ref_pb2.MediaRef()
    copy.CopyFrom(ref)
    if pin:
        copy.pin = pin
    return mpb.MediaSelector(media_ref=copy)


def cache_key_of(selector: mpb.MediaSelector) -> str:
    """The (ref, pin) key of a selector, or `media:<sha256>` for a blob."""
    if selector.WhichOneof("ref") == "blob_ref":
        return selector.blob_ref
    ref = selector.media_ref
    return f"{ref.session_id}/{ref.entry_uuid}/{ref.index}#{ref.pin}"


# Thumbnail sizes (the longest side in pixels) and their ThumbnailSize values.
THUMBNAIL_SIZES: dict[int, mpb.ThumbnailSize.ValueType] = {
    96: mpb.THUMBNAIL_SIZE_96,
    320: mpb.THUMBNAIL_SIZE_320,
    960: mpb.THUMBNAIL_SIZE_960,
}


def thumbnail_size_of(size: int | None) -> mpb.ThumbnailSize.ValueType:
    """The ThumbnailSize of a size in pixels (None: the original); ValueError otherwise."""
    if size is None:
        return mpb.THUMBNAIL_SIZE_UNSPECIFIED
    try:
        return THUMBNAIL_SIZES[size]
    except KeyError:
        sizes = ", ".join(str(pixels) for pixels in THUMBNAIL_SIZES)
        raise ValueError(f"size must be one of {sizes} (pixels), or None") from None


def fetch_key_of(selector: mpb.MediaSelector, size: int | None) -> str:
    """The cache key of a fetch: the selector's, or its thumbnail's at `size`."""
    key = cache_key_of(selector)
    # Never `media:...`: the cache reads those as the sha256 of the bytes themselves.
    return key if size is None else f"thumbnail-{size}:{key}"


@dataclass(frozen=True, slots=True)
class Media:
    """One medium: its metadata and all its bytes (sha256-verified)."""

    metadata: mpb.MediaMetadata
    data: bytes


def verify_media(metadata: mpb.MediaMetadata, data: bytes) -> Media:
    """Media whose bytes match the metadata's size and sha256; DataLoss otherwise."""
    if len(data) != metadata.size_bytes or hashlib.sha256(data).hexdigest() != metadata.sha256:
        raise DataLoss("the media bytes do not match their sha256")
    return Media(metadata, data)


class MediaCache:
    """An LRU of media bytes, bounded by bytes, keyed by sha256 and by (ref, pin).

    A transcript ref with its pin always names the same bytes (a changed
    payload fails the pin), so `(ref, pin) -> sha256` is cached forever
    alongside the bytes; two refs of the same photo share one copy. Thread-safe.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Media] = OrderedDict()
        self._keys: dict[str, str] = {}
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        """The bytes held now."""
        return self._size

    def sha256_for(self, key: str) -> str | None:
        """The sha256 a (ref, pin) key or `media:` ref is known to name."""
        if key.startswith("media:"):
            return key.removeprefix("media:")
        with self._lock:
            return self._keys.get(key)

    def get(self, sha256: str) -> Media | None:
        """The cached media with this sha256 (marked recently used), or None."""
        with self._lock:
            media = self._items.get(sha256)
            if media is not None:
                self._items.move_to_end(sha256)
            return media

    def lookup(self, key: str) -> Media | None:
        """The cached media a (ref, pin) key or `media:` ref names, or None."""
        sha256 = self.sha256_for(key)
        return None if sha256 is None else self.get(sha256)

    def remember(self, key: str, sha256: str) -> None:
        """Record that a (ref, pin) key names these bytes."""
        if not key.startswith("media:"):
            with self._lock:
                self._keys[key] = sha256

    def put(self, key: str, media: Media) -> None:
        """Store media under its sha256 (and the key); evict least recently used past the bound."""
        sha256 = media.metadata.sha256
        self.remember(key, sha256)
        size = len(media.data)
        if size > self.max_bytes:
            return
        with self._lock:
            if sha256 in self._items:
                self._items.move_to_end(sha256)
                return
            self._items[sha256] = media
            self._size += size
            while self._size > self.max_bytes and self._items:
                _, evicted = self._items.popitem(last=False)
                self._size -= len(evicted.data)


@dataclass(frozen=True, slots=True)
class Upload:
    """One attachment ready to upload: its bytes, sha256, name and declared type."""

    data: bytes
    sha256: str
    name: str
    media_type: str

    @property
    def ref(self) -> str:
        """Its content-addressed reference."""
        return f"media:{self.sha256}"

    def requests(self) -> Iterable[mpb.WriteBlobRequest]:
        """The WriteBlob stream: the header, then the bytes in chunks."""
        yield mpb.WriteBlobRequest(
            header=mpb.WriteBlobHeader(
                sha256=self.sha256, size_bytes=len(self.data), media_type=self.media_type
            )
        )
        for start in range(0, len(self.data), UPLOAD_CHUNK):
            yield mpb.WriteBlobRequest(data=self.data[start : start + UPLOAD_CHUNK])


def guess_media_type(data: bytes, name: str = "") -> str:
    """A declared media type for an upload (informational: the server sniffs anyway).

    The bytes' image type when they are an image; else the name's type, unless the
    name claims an image the bytes are not (a text file named .png is octet-stream).
    """
    sniffed = sniff(data[:SNIFF_BYTES])
    if sniffed.safe_inline:
        return sniffed.content_type
    guessed, _ = mimetypes.guess_type(name) if name else (None, None)
    if guessed is None or guessed.startswith("image/"):
        return OCTET_STREAM
    return guessed


def prepare_upload(image: str | os.PathLike[str] | bytes, number: int = 0) -> Upload:
    """An Upload from a file path or raw bytes (named `image-<n>` when bytes)."""
    if isinstance(image, bytes | bytearray | memoryview):
        data = bytes(image)
        name = f"image-{number}"
    else:
        path = Path(image)
        data = path.read_bytes()
        name = path.name
    return Upload(data, hashlib.sha256(data).hexdigest(), name[:255], guess_media_type(data, name))


def new_txn_id() -> str:
    """A fresh client_txn_id ([A-Za-z0-9_-], 26 characters)."""
    return "tx-" + secrets.token_urlsafe(17)[:23]


def accept_request(
    txn_id: str,
    text: str,
    uploads: Iterable[Upload],
    *,
    session_id: str | None = None,
    chat_key: str | None = None,
) -> hpb.AcceptMessageRequest:
    """The AcceptMessage request of a send (exactly one of session_id, chat_key)."""
    if bool(session_id) == bool(chat_key):
        raise InvalidArgument("give exactly one of a session id and a chat key")
    attachments = [hpb.Attachment(ref=u.ref, name=u.name, media_type=u.media_type) for u in uploads]
    fields: dict[str, Any] = {"session_id": session_id} if session_id else {"chat_key": chat_key}
    return hpb.AcceptMessageRequest(
        client_txn_id=txn_id, text=text, attachments=attachments, **fields
    )


@dataclass(slots=True)
class ReadProgress:
    """What a resumable ReadMedia has received so far."""

    metadata: mpb.MediaMetadata | None = None
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0

    def feed(self, message: mpb.ReadMediaResponse) -> None:
        """Take one stream message (the metadata is kept from the first attempt)."""
        if message.WhichOneof("item") == "metadata":
            if self.metadata is not None and message.metadata.sha256 != self.metadata.sha256:
                raise DataLoss("the media changed while it was read")
            if self.metadata is None:
                self.metadata = message.metadata
        else:
            self.chunks.append(message.data)
            self.received += len(message.data)

    def finish(self) -> Media:
        """The verified media."""
        if self.metadata is None:
            raise DataLoss("the media stream carried no metadata")
        return verify_media(self.metadata, b"".join(self.chunks))
