"""The synchronous media client: photos by reference (resumable, verified, cached) and uploads.

    with MediaClient("127.0.0.1:50052") as media:
        photo = media.fetch(entry.media_refs[0])     # bytes once, then from the cache
        uploads = media.upload(["shot.png"])         # FindMissingBlobs, then WriteBlob

`read_media` resumes an interrupted stream from the bytes already received
(read_offset, as google.bytestream) and checks the sha256 of the whole.
`fetch` goes through a `MediaCache` keyed by sha256 and by (ref, pin): a ref
seen before costs no call; a new ref first asks StatMedia (no bytes) for its
sha256, so a photo the cache already holds is never read twice.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from os import PathLike
from typing import Any

import grpc

from client._base import SyncChannelClient
from client._core import (
    DEFAULT_DEADLINES,
    DEFAULT_RETRY,
    Deadlines,
    Media,
    MediaCache,
    ReadProgress,
    RetryPolicy,
    Upload,
    fetch_key_of,
    media_addr,
    prepare_upload,
    selector_of,
    thumbnail_size_of,
)
from client._retry import retry_sync
from client.errors import DataLoss, error_class, from_rpc_error
from client.tls import TlsOptions
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2

MediaTarget = ref_pb2.MediaRef | mpb.MediaSelector | str
ImageSource = str | PathLike[str] | bytes


def stat_error(result: mpb.StatMediaResult) -> Exception | None:
    """The typed exception of one failed StatMedia result, or None."""
    if result.WhichOneof("result") != "error":
        return None
    code = getattr(grpc.StatusCode, result.error.code, grpc.StatusCode.UNKNOWN)
    reason = result.error.reason
    return error_class(code, reason)(result.error.message, code=code, reason=reason)


class MediaStream:
    """An open ReadMedia call: `metadata`, then `chunks()`; `cancel()` ends it early."""

    def __init__(self, metadata: mpb.MediaMetadata, call: Any, messages: Iterator[Any]) -> None:
        self.metadata = metadata
        self._call = call
        self._messages = messages

    def chunks(self) -> Iterator[bytes]:
        """The bytes as the service sends them; the call is cancelled if left early."""
        try:
            for message in self._messages:
                if message.WhichOneof("item") == "data":
                    yield message.data
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            self._call.cancel()

    def cancel(self) -> None:
        """End the call without reading its bytes."""
        self._call.cancel()


class MediaClient(SyncChannelClient):
    """A typed, retrying, caching client of scrollback.media.v1.MediaService."""

    def __init__(
        self,
        addr: str | None = None,
        *,
        channel: grpc.Channel | None = None,
        deadlines: Deadlines = DEFAULT_DEADLINES,
        retry: RetryPolicy = DEFAULT_RETRY,
        cache: MediaCache | None = None,
        interceptors: Sequence[Any] = (),
        metadata: Sequence[tuple[str, str]] = (),
        token: str | None = None,
        rng: random.Random | None = None,
        tls: TlsOptions | bool | None = None,
    ) -> None:
        super().__init__(media_addr(addr), channel, interceptors, metadata, token, rng, tls)
        self.stub = media_pb2_grpc.MediaServiceStub(self._intercepted)
        self.deadlines = deadlines
        self.retry = retry
        self.cache = cache if cache is not None else MediaCache()

    def read_media(
        self, target: MediaTarget, pin: str | None = None, *, size: int | None = None
    ) -> Media:
        """All bytes of one medium, verified; an interrupted stream resumes at its offset.

        `size` (96, 320 or 960: the longest side in pixels) asks for a WebP
        thumbnail instead of the original; ValueError for any other size.
        """
        selector = selector_of(target, pin)
        thumbnail = thumbnail_size_of(size)
        progress = ReadProgress()

        def attempt() -> Media:
            request = mpb.ReadMediaRequest(
                media=selector, read_offset=progress.received, size=thumbnail
            )
            for message in self.stub.ReadMedia(
                request, timeout=self.deadlines.stream, metadata=self.metadata
            ):
                progress.feed(message)
            return progress.finish()

        return retry_sync(attempt, self.retry, self._rng, self.addr)

    def open_media(
        self,
        target: MediaTarget,
        pin: str | None = None,
        *,
        read_offset: int = 0,
        read_limit: int = 0,
        size: int | None = None,
        chunk_size: int = 0,
    ) -> MediaStream:
        """A ReadMedia stream whose metadata has arrived; its bytes are read chunk by chunk.

        For a caller that passes the bytes on as they come: nothing is buffered
        beyond one chunk, nothing is retried or verified (the caller streams a
        part, or sends bytes before the end is known). A failure before the
        metadata raises the typed error here. `chunk_size` asks for larger
        chunks than the server's own (ReadMediaRequest.chunk_size; 0: the server's).
        """
        request = mpb.ReadMediaRequest(
            media=selector_of(target, pin),
            read_offset=read_offset,
            read_limit=read_limit,
            size=thumbnail_size_of(size),
            chunk_size=chunk_size,
        )
        call: Any = self.stub.ReadMedia(
            request, timeout=self.deadlines.stream, metadata=self.metadata
        )
        messages = iter(call)
        try:
            first = next(messages, None)
        except grpc.RpcError as error:
            call.cancel()
            raise from_rpc_error(error) from None
        if first is None or first.WhichOneof("item") != "metadata":
            call.cancel()
            raise DataLoss("the media stream carried no metadata")
        return MediaStream(first.metadata, call, messages)

    def stat_media(
        self, targets: Iterable[MediaTarget], *, size: int | None = None
    ) -> list[mpb.StatMediaResult]:
        """Metadata of many media in one call (per-item errors in the results).

        With `size` (96, 320 or 960), the metadata of each one's thumbnail at
        that size (its width and height), made by the server if not cached yet;
        at most 100 targets then. ValueError for any other size.
        """
        request = mpb.StatMediaRequest(
            media=[selector_of(t) for t in targets], size=thumbnail_size_of(size)
        )
        response = retry_sync(
            lambda: self.stub.StatMedia(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        )
        return list(response.results)

    def fetch(
        self, target: MediaTarget, pin: str | None = None, *, size: int | None = None
    ) -> Media:
        """One medium through the cache: never read twice while it stays cached.

        With `size`, the thumbnail at that size (cached under its own key).
        """
        selector = selector_of(target, pin)
        thumbnail_size_of(size)  # ValueError before any call
        key = fetch_key_of(selector, size)
        cached = self.cache.lookup(key)
        if cached is not None:
            return cached
        # StatMedia names the original's sha256: it spares a read of the original only.
        if (
            size is None
            and selector.WhichOneof("ref") == "media_ref"
            and self.cache.sha256_for(key) is None
        ):
            (result,) = self.stat_media([selector])
            error = stat_error(result)
            if error is not None:
                raise error
            self.cache.remember(key, result.metadata.sha256)
            cached = self.cache.get(result.metadata.sha256)
            if cached is not None:
                return cached
        media = self.read_media(selector, size=size)
        self.cache.put(key, media)
        return media

    def find_missing_blobs(self, sha256s: Iterable[str]) -> list[str]:
        """The digests the blob store does not have, in the order asked."""
        request = mpb.FindMissingBlobsRequest(sha256=list(sha256s))
        response = retry_sync(
            lambda: self.stub.FindMissingBlobs(
                request, timeout=self.deadlines.unary, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        )
        return list(response.missing_sha256)

    def write_blob(self, upload: Upload) -> mpb.WriteBlobResponse:
        """Upload one blob (content-addressed, so retrying it is safe)."""
        return retry_sync(
            lambda: self.stub.WriteBlob(
                iter(upload.requests()), timeout=self.deadlines.stream, metadata=self.metadata
            ),
            self.retry,
            self._rng,
            self.addr,
        )

    def upload(self, images: Iterable[ImageSource | Upload]) -> list[Upload]:
        """Upload attachments the store lacks (FindMissingBlobs first); return them all."""
        uploads = [
            image if isinstance(image, Upload) else prepare_upload(image, number)
            for number, image in enumerate(images)
        ]
        if not uploads:
            return []
        missing = set(self.find_missing_blobs(dict.fromkeys(u.sha256 for u in uploads)))
        for upload in uploads:
            if upload.sha256 in missing:
                self.write_blob(upload)
                missing.discard(upload.sha256)
        return uploads
