"""A per-worker cache of decoded transcript images, kept as ready-to-send ReadMedia chunks.

Decoding a transcript image (base64 from the line, in slices, with a sha256
check of the whole) costs more than sending it, and the same photo is read
again and again (a viewer scrolling back, several clients of one session).
This cache keeps the decoded bytes of images up to `MAX_CACHED_IMAGE_BYTES`
(16 MiB), at most `max_bytes` in all per worker process
(`SCROLLBACK_MEDIA_DECODED_CACHE_BYTES`, default 64 MiB, 0 turns it off),
least recently used out first.

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
from collections.abc import Callable

KIB = 1024
MIB = 1024 * KIB
DEFAULT_DECODED_CACHE_BYTES = 64 * MIB
MAX_CACHED_IMAGE_BYTES = 16 * MIB
# ReadMediaResponse's `bytes data = 2`: field 2, wire type 2 (length-delimited).
_DATA_TAG = b"\x12"

# (device, inode, payload's raw start offset in the file, pin)
DecodedKey = tuple[int, int, int, str]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Encoded:
    """One `ReadMediaResponse{data}` already serialized: `wire` is what grpc sends.

    `data` is the chunk (a view into `wire`, no copy), for whoever counts bytes.
    """

    __slots__ = ("_header", "wire")

    def __init__(self, chunk: bytes | memoryview) -> None:
        header = _DATA_TAG + _varint(len(chunk))
        self.wire = header + chunk  # one copy, straight from the decoded block
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


def decode_chunks(
    read: Callable[[int, int], bytes], size: int, chunk_size: int, block: int
) -> DecodedImage:
    """The image of `size` bytes read whole with `read(offset, length)`, in order, as chunks.

    `read` is the verified reader (it raises CorruptMediaError if the bytes no
    longer hash to the metadata); reads are `block` bytes, a multiple of the
    chunk size.
    """
    block = max(chunk_size, block - block % chunk_size)
    chunks: list[Encoded] = []
    position = 0
    while position < size:
        data = read(position, min(block, size - position))
        if not data:
            break
        view = memoryview(data)
        for at in range(0, len(data), chunk_size):
            chunks.append(Encoded(view[at : at + chunk_size]))
        view.release()
        position += len(data)
    return DecodedImage(position, chunk_size, chunks)


class DecodedCache:
    """Decoded images by key, at most `max_bytes` in all, least recently used out first.

    Thread-safe (filled on read threads, read on the event loop).
    """

    def __init__(self, max_bytes: int, max_item_bytes: int = MAX_CACHED_IMAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_item_bytes = min(max_item_bytes, max_bytes)
        self._items: OrderedDict[DecodedKey, DecodedImage] = OrderedDict()
        self._bytes = 0
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

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._items.clear()
            self._bytes = 0
