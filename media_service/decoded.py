"""A per-worker cache of decoded transcript images, kept as ready-to-send ReadMedia chunks.

Decoding a transcript image (base64 from the line, in slices, with a sha256
check of the whole) costs more than sending it, and the same photo is read
again and again (a viewer scrolling back, several clients of one session).
This cache keeps the decoded bytes of images up to `MAX_CACHED_IMAGE_BYTES`
(16 MiB), at most `max_bytes` in all per worker process
(`SCROLLBACK_MEDIA_DECODED_CACHE_BYTES`, default 64 MiB, 0 turns it off),
least recently used out first.

A miss is served exactly as without the cache (decoded slice by slice from
the file, its sha256 checked at the end, DATA_LOSS if the transcript changed
meanwhile); a stream that sends a whole image that way keeps the chunks it
sent (`Filler`) and caches them once the last read checked the hash. One
stream fills a key at a time, and the bytes being filled count against the
cache's size, so filling streams hold at most that much between them.

An entry holds the image already cut into `ReadMediaResponse{data}` messages
of the server's chunk size, each serialized once (`Encoded`): sending one is
handing grpc bytes, no message built or serialized per send. The wire format
is exactly what `ReadMediaResponse.SerializeToString()` gives.

The key is (device, inode, payload offset in the file, pin). It is looked up
only after the request's line was found and verified exactly as without the
cache (the line read from the file now, its top-level uuid, the image index and
the pin of the payload's raw text as it stands now): the pin is a hash of that
raw text, so a verified line whose payload at that offset has that pin decodes
to the cached bytes. A changed transcript therefore still gives the contract's
answer (PinMismatch, NOT_FOUND, or a search that finds the line elsewhere).

Per stream the server still holds O(chunk) of payload: a stream holds its
entry by weak reference only, taking one chunk at a time; an entry evicted
mid-stream is freed at once, and that stream goes on from the file.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from scrollback.linefile import FileVersion
from scrollback.media.v1 import media_pb2
from scrollback.server.serialized import Serialized, field_header

KIB = 1024
MIB = 1024 * KIB
MAX_CACHED_IMAGE_BYTES = 16 * MIB
# ReadMediaResponse's `bytes data`: the field a chunk is sent in.
_DATA_FIELD = media_pb2.ReadMediaResponse.DESCRIPTOR.fields_by_name["data"].number

# (file version, payload's raw start offset in the file, pin)
DecodedKey = tuple[FileVersion, int, str]


class Encoded(Serialized):
    """One `ReadMediaResponse{data}` already serialized: `wire` is what grpc sends.

    The chunk is `parts` one after the other (several consecutive chunks sent
    as one message); `data` is it (a view into `wire`, no copy), for whoever
    counts bytes.
    """

    __slots__ = ("_header",)

    def __init__(self, *parts: bytes | memoryview) -> None:
        header = field_header(_DATA_FIELD, sum(len(part) for part in parts))
        super().__init__(b"".join((header, *parts)))  # one copy, straight from the parts
        self._header = len(header)

    @property
    def data(self) -> memoryview:
        """The chunk's bytes."""
        return memoryview(self.wire)[self._header :]


class DecodedImage:
    """A decoded image as the chunks ReadMedia sends, `chunk_size` bytes each (the last fewer)."""

    __slots__ = ("__weakref__", "chunk_size", "chunks", "size")

    def __init__(self, size: int, chunk_size: int, chunks: list[Encoded]) -> None:
        self.size = size
        self.chunk_size = chunk_size
        self.chunks = chunks


class Filler:
    """The chunks of one image as a stream first sends them from the file, cached if it ends.

    `DecodedCache.begin_fill` hands one out per key at a time, its size
    reserved in the cache's budget, so streams filling at once hold at most
    the cache's size between them. `finish` caches what was collected (the
    whole image, read in order by the verified reader, whose last read
    checked its sha256); `abandon` (after an error, a cancel, a stall) drops it.
    """

    def __init__(self, cache: DecodedCache, key: DecodedKey, size: int, chunk_size: int) -> None:
        self._cache = cache
        self._key = key
        self._size = size
        self._chunk_size = chunk_size
        self._chunks: list[Encoded] = []
        self._collected = 0
        self._open = True

    def add(self, chunk: Encoded) -> None:
        """The next chunk sent (in order from the image's first byte)."""
        self._chunks.append(chunk)
        self._collected += len(chunk.data)

    def finish(self) -> None:
        """The stream sent the whole image: cache it."""
        if not self._open:
            return
        chunks, self._chunks = self._chunks, []
        image = None
        if self._collected == self._size:
            image = DecodedImage(self._size, self._chunk_size, chunks)
        self._open = False
        self._cache._end_fill(self._key, self._size, image)

    def abandon(self) -> None:
        """The stream ended before the whole image was sent: cache nothing."""
        if self._open:
            self._open = False
            self._chunks = []
            self._cache._end_fill(self._key, self._size, None)


class DecodedCache:
    """Decoded images by key, at most `max_bytes` in all, least recently used out first.

    Thread-safe (filled on read threads, read on the event loop).
    """

    def __init__(self, max_bytes: int, max_item_bytes: int = MAX_CACHED_IMAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_item_bytes = min(max_item_bytes, max_bytes)
        self._items: OrderedDict[DecodedKey, DecodedImage] = OrderedDict()
        self._bytes = 0
        # Keys being filled by a stream now, and the bytes reserved for them.
        self._filling: set[DecodedKey] = set()
        self._reserved = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def holds(self, size: int) -> bool:
        """True if an image of `size` bytes would be cached."""
        return 0 < size <= self.max_item_bytes

    @property
    def total_bytes(self) -> int:
        """Decoded bytes held now."""
        return self._bytes

    def get(self, key: DecodedKey) -> weakref.ref[DecodedImage] | None:
        """A weak reference to the cached image (most recently used now), or None."""
        with self._lock:
            image = self._items.get(key)
            if image is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return weakref.ref(image)

    def put(self, key: DecodedKey, image: DecodedImage) -> weakref.ref[DecodedImage] | None:
        """Cache `image` (evicting the least recently used); a weak reference, None if too big."""
        if not self.holds(image.size):
            return None
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            self._items[key] = image
            self._bytes += image.size
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.size
            return weakref.ref(image)

    def begin_fill(self, key: DecodedKey, size: int, chunk_size: int) -> Filler | None:
        """A filler for an image a stream is about to send whole from the file; None if not.

        None when the cache is off, the image too large, another stream is
        filling the same key, or the fills under way already reserve the budget.
        """
        if not self.holds(size):
            return None
        with self._lock:
            if key in self._filling or self._reserved + size > self.max_bytes:
                return None
            self._filling.add(key)
            self._reserved += size
        return Filler(self, key, size, chunk_size)

    def _end_fill(self, key: DecodedKey, size: int, image: DecodedImage | None) -> None:
        with self._lock:
            self._filling.discard(key)
            self._reserved -= size
        if image is not None:
            self.put(key, image)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._items.clear()
            self._bytes = 0
