"""Transcripts kept as objects in an S3-compatible bucket, read as byte sources.

`SCROLLBACK_TRANSCRIPTS=s3://bucket/prefix` names a bucket instead of a
directory (the Path-typed setting keeps it as `s3:/bucket/prefix`;
`bucket_location` reads either). The client is obstore (the Rust
object_store crate); its endpoint, credentials and region come from the
standard AWS variables it reads itself (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
`AWS_REGION`); a named profile of the shared config files (`AWS_PROFILE`)
is read through boto3 (`profile_credentials`); an `http://` endpoint is
allowed as configured.

`ObjectSource` is the `ByteSource` (scrollback.linefile) of one object as it
was when opened: its size and ETag come from a HEAD (or a listing), and every
read is a ranged GET with `If-Match` on that ETag, so bytes of two versions
are never mixed: a read after the object was replaced fails
(`ObjectChangedError`) and the next open sees the new version. A store that
sends no ETags (logged once) pins a version by its size and Last-Modified
second instead (`ObjectInfo.pin`): the GET carries `If-Unmodified-Since` and
its answer must report that size and time. Its `FileVersion` takes the key's
identity where a file has its device and inode (`OBJECT_DEV`, a hash of the
key) and the head hash as for a file, so an object re-uploaded with more
bytes after the same first ones keeps its version (and its line index), and
one rewritten from its start does not.

Reads go through a `BlockCache` shared by every source of the bucket: aligned
blocks of `BLOCK_BYTES` keyed by (key, pin, block), least recently used
dropped past a byte budget, so the latest window of a large object read a
second time costs no GET at all. Missing neighbouring blocks are fetched in
one GET.

Faults: obstore retries idempotent reads on 5xx, dropped connections and
timeouts (`RETRIES` times, within `RETRY_SECONDS`); what still fails, and a
range answered with fewer bytes than asked (a truncated body), raises
`TranscriptsUnavailableError`, which the services send as UNAVAILABLE. A
missing object is FileNotFoundError, as a missing file is.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore
import xxhash
from obstore.exceptions import (
    BaseError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import S3Store

from scrollback.linefile import ByteSource

if TYPE_CHECKING:
    from obstore import GetOptions, ObjectMeta
    from obstore.store import ClientConfig

log = logging.getLogger(__name__)

BUCKET_SCHEME = "s3://"
# The device number every object's version carries, where a file has its device.
OBJECT_DEV = 1 << 62
# The cache's unit: reads are rounded out to whole aligned blocks of this size.
BLOCK_BYTES = 1024 * 1024
# Retries of an idempotent request (5xx, dropped connection, timeout) and their time bound.
RETRIES = 3
RETRY_SECONDS = 10.0
# One request's bound (each attempt), and the connect phase's.
REQUEST_SECONDS = 10.0
CONNECT_SECONDS = 3.0


class TranscriptsUnavailableError(Exception):
    """The bucket did not answer (a timeout, 5xx, a refused or truncated read) after retries."""

    def __init__(self, text: str = "the transcript store is unavailable; retry later") -> None:
        super().__init__(text)


class ObjectChangedError(TranscriptsUnavailableError):
    """The object was replaced while it was being read (its ETag moved): read it again."""

    def __init__(self) -> None:
        super().__init__("the transcript was replaced while it was read; retry")


class BucketConfigError(ValueError):
    """The bucket cannot be used (missing, or the credentials are refused): a start-up error."""


@dataclass(frozen=True, slots=True)
class BucketLocation:
    """A bucket and the key prefix the transcripts root is under ("" or without slashes around)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        """`s3://bucket/prefix` (no secret in it)."""
        return BUCKET_SCHEME + self.bucket + (f"/{self.prefix}" if self.prefix else "")

    def key(self, relative: str) -> str:
        """The object key of a name under the prefix."""
        return f"{self.prefix}/{relative}" if self.prefix else relative


def bucket_location(location: str) -> BucketLocation | None:
    """The bucket a transcripts location names (`s3://bucket/prefix`), or None for a directory."""
    if not location.startswith(BUCKET_SCHEME):
        return None
    parts = [p for p in location[len(BUCKET_SCHEME) :].split("/") if p]
    if not parts:
        raise BucketConfigError("a transcripts bucket must be given as s3://BUCKET[/PREFIX]")
    return BucketLocation(parts[0], "/".join(parts[1:]))


# Where transcripts are kept, as a setting names it once parsed (`parse_location`).
Location = Path | BucketLocation


def location_text(location: Location) -> str:
    """A parsed location as a setting writes it: the directory, or the bucket's URL."""
    return location.url if isinstance(location, BucketLocation) else str(location)


def parse_location(value: str | Path | BucketLocation) -> Location:
    """A transcripts setting parsed once: a bucket (`s3://BUCKET[/PREFIX]`) or a directory.

    A directory's `~` is expanded. A bucket URL without a bucket raises
    BucketConfigError; a URL is never kept in a Path.
    """
    if isinstance(value, (BucketLocation, Path)):
        return value.expanduser() if isinstance(value, Path) else value
    bucket = bucket_location(value)
    return bucket if bucket is not None else Path(value).expanduser()


@dataclass(frozen=True, slots=True)
class ObjectStat:
    """An object's stat, in the fields a file's fstat gives (scrollback.linefile.SourceStat).

    Its change time is the end of its Last-Modified second (S3 gives whole
    seconds), so a stamp taken from it (scrollback.transcripts.stamp_of)
    settles only once no upload in that second can follow unseen.
    """

    st_size: int
    st_dev: int
    st_ino: int
    st_mtime_ns: int
    st_ctime_ns: int
    # What names the version (ObjectInfo.pin), so what is kept per version is exact.
    pin: str = ""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object's listing or HEAD: key, size, ETag, Last-Modified."""

    key: str
    size: int
    etag: str
    modified_ns: int

    @classmethod
    def of(cls, meta: ObjectMeta) -> ObjectInfo:
        """From obstore's metadata."""
        modified = meta["last_modified"]
        return cls(meta["path"], meta["size"], _quoted(meta["e_tag"]), _ns(modified))

    @property
    def pin(self) -> str:
        """What names this version: its ETag, or its size and Last-Modified from a store
        that sends no ETags (an `@` never starts an ETag, so the two never meet)."""
        return self.etag or f"@{self.size}:{self.modified_ns}"

    def same_version(self, answer: ObjectMeta) -> bool:
        """True if a read's answer came from this version (its ETag, else size and time)."""
        if self.etag:
            return not answer["e_tag"] or _quoted(answer["e_tag"]) == self.etag
        return answer["size"] == self.size and _ns(answer["last_modified"]) == self.modified_ns

    def stat(self) -> ObjectStat:
        """As a file's stat: the key's identity where a file has its device and inode."""
        return ObjectStat(
            self.size,
            OBJECT_DEV,
            key_identity(self.key),
            self.modified_ns,
            self.modified_ns + 1_000_000_000,
            self.pin,
        )


def _quoted(etag: str | None) -> str:
    """An ETag in its header form (some stores list it without the quotes); "" for none."""
    etag = (etag or "").strip()
    if not etag or etag.startswith(('"', "W/")):
        return etag
    return f'"{etag}"'


def key_identity(key: str) -> int:
    """The number an object's key stands for where a file has its inode (63 bits)."""
    return xxhash.xxh3_64_intdigest(key.encode()) >> 1


def _ns(moment: datetime) -> int:
    """Whole seconds: a HEAD's Last-Modified has no more, a listing's may have milliseconds."""
    return int(moment.timestamp()) * 1_000_000_000


class BlockCache:
    """Aligned blocks of objects' versions within a byte budget, kept safe from scans.

    A block read once waits in a probation segment; read again, it moves to the
    protected segment (at most three quarters of the budget). Eviction takes the
    least recently used block of probation first, so a scan (the search indexer
    reading a whole object once) only cycles probation and never pushes out
    the blocks that windows keep coming back to (a segmented LRU).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self._probation: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()
        self._protected: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()
        self._protected_bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int]) -> bytes | None:
        """The block if held (now the most recently used; protected if it was on probation)."""
        with self._lock:
            block = self._protected.get(key)
            if block is not None:
                self._protected.move_to_end(key)
                return block
            block = self._probation.pop(key, None)
            if block is None:
                return None
            self._protected[key] = block
            self._protected_bytes += len(block)
            while self._protected_bytes > self.budget * 3 // 4 and len(self._protected) > 1:
                demoted, data = self._protected.popitem(last=False)
                self._protected_bytes -= len(data)
                self._probation[demoted] = data
            return block

    def put(self, key: tuple[str, str, int], block: bytes) -> None:
        """Hold a block on probation, dropping the least recently used past the budget."""
        if len(block) > self.budget:
            return
        with self._lock:
            if key in self._protected or key in self._probation:
                return  # the same version's block: the same bytes
            self._probation[key] = block
            self.held += len(block)
            while self.held > self.budget:
                if self._probation:
                    _, dropped = self._probation.popitem(last=False)
                else:
                    _, dropped = self._protected.popitem(last=False)
                    self._protected_bytes -= len(dropped)
                self.held -= len(dropped)


def profile_credentials() -> Any | None:
    """A credential provider reading a named AWS profile, or None when the keys are in the env.

    obstore reads keys, session tokens, web identity and instance roles from the
    environment itself, but not the shared config and credentials files; with
    `AWS_PROFILE` set, or no `AWS_ACCESS_KEY_ID`, boto3's session reads those
    (profiles, SSO, role chains) as every AWS tool does. boto3 is imported only
    then. None when neither finds credentials (obstore's own chain is left to try).
    """
    if os.environ.get("AWS_ACCESS_KEY_ID") and not os.environ.get("AWS_PROFILE"):
        return None
    import boto3.session
    from botocore.exceptions import BotoCoreError
    from obstore.auth.boto3 import Boto3CredentialProvider

    try:
        session = boto3.session.Session()
        if session.get_credentials() is None:
            return None
        return Boto3CredentialProvider(session)
    except BotoCoreError as error:
        # A named profile that does not exist, or a broken config file: a start-up error.
        raise BucketConfigError(
            f"the AWS profile cannot be read ({type(error).__name__})"
        ) from None


class Bucket:
    """One bucket's client, block cache and request counts (`gets`, `heads`, `lists`: listing
    calls and the chunks of up to 1000 keys they returned)."""

    def __init__(
        self,
        location: BucketLocation,
        *,
        cache_bytes: int,
        request_seconds: float = REQUEST_SECONDS,
        retries: int = RETRIES,
        endpoint: str | None = None,
    ) -> None:
        self.location = location
        endpoint = (
            endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL", "")
        )
        client: ClientConfig = {
            "timeout": timedelta(seconds=request_seconds),
            "connect_timeout": timedelta(seconds=min(CONNECT_SECONDS, request_seconds)),
        }
        if endpoint.startswith("http://"):
            client["allow_http"] = True
        options: dict[str, Any] = {}
        if endpoint:
            options["endpoint"] = endpoint
        provider = profile_credentials()
        if provider is not None:
            options["credential_provider"] = provider
        region_set = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region_set and (provider is None or "region" not in provider.config):
            options["region"] = "us-east-1"
        self.store = S3Store(
            location.bucket,
            client_options=client,
            retry_config={
                "max_retries": retries,
                "retry_timeout": timedelta(seconds=RETRY_SECONDS),
                "backoff": {
                    "init_backoff": timedelta(milliseconds=50),
                    "max_backoff": timedelta(seconds=1),
                    "base": 2,
                },
            },
            **options,
        )
        self.cache = BlockCache(cache_bytes)
        self.gets = 0
        self.heads = 0
        self.lists = 0
        # Set (and logged) once an object without an ETag is seen.
        self.etagless = False

    def check(self) -> None:
        """Raise BucketConfigError unless the bucket exists and the credentials may list it;
        log whether its objects have ETags (from the first one listed, if any)."""
        try:
            obstore.list_with_delimiter(self.store, self.location.prefix or None)
            for batch in obstore.list(self.store, self.location.prefix or None, chunk_size=1):
                for meta in batch:
                    self._note_etag(ObjectInfo.of(meta))
                break
        except (PermissionDeniedError, UnauthenticatedError):
            raise BucketConfigError(
                f"the transcripts bucket {self.location.url} refused the credentials "
                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
            ) from None
        except BaseError as error:
            text = str(error)
            if "NoSuchBucket" in text:
                raise BucketConfigError(
                    f"the transcripts bucket {self.location.url} does not exist"
                ) from None
            if "AccessDenied" in text or "SignatureDoesNotMatch" in text or "403" in text:
                raise BucketConfigError(
                    f"the transcripts bucket {self.location.url} refused the credentials "
                    "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
                ) from None
            raise BucketConfigError(
                f"the transcripts bucket {self.location.url} cannot be reached "
                "(AWS_ENDPOINT_URL, AWS_REGION)"
            ) from None

    def _note_etag(self, info: ObjectInfo) -> None:
        """Log once that the store sends no ETags, when an object without one is first seen."""
        if info.etag or self.etagless:
            return
        self.etagless = True
        log.warning(
            "the transcript store %s sends no ETags: each object version is pinned by its size "
            "and Last-Modified second (a replacement of the same size within that second is "
            "not seen)",
            self.location.url,
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (a key prefix ending in "/", or "" for the whole bucket)."""
        self.lists += 1
        try:
            for batch in obstore.list(self.store, prefix or None, chunk_size=1000):
                self.lists += 1
                for meta in batch:
                    info = ObjectInfo.of(meta)
                    self._note_etag(info)
                    yield info
        except NotFoundError:
            return
        except BaseError:
            raise TranscriptsUnavailableError() from None

    def head(self, key: str) -> ObjectInfo:
        """The object's metadata now; FileNotFoundError if there is none."""
        self.heads += 1
        try:
            info = ObjectInfo.of(obstore.head(self.store, key))
        except NotFoundError:
            raise FileNotFoundError("no such transcript") from None
        except BaseError:
            raise TranscriptsUnavailableError() from None
        self._note_etag(info)
        return info

    def open(self, key: str) -> ObjectSource:
        """The object as it is now, as a byte source (FileNotFoundError if missing)."""
        return ObjectSource(self, self.head(key))

    def fetch(self, info: ObjectInfo, start: int, end: int) -> bytes:
        """The bytes [start, end) of that version of the object, exactly, or raise."""
        self.gets += 1
        options: GetOptions = {"range": (start, end)}
        if info.etag:
            options["if_match"] = info.etag
        else:
            options["if_unmodified_since"] = datetime.fromtimestamp(
                info.modified_ns // 1_000_000_000, UTC
            )
        try:
            answer = obstore.get(self.store, info.key, options=options)
            if not info.same_version(answer.meta):
                # A store (or proxy) that ignored the condition: the answer names its version.
                raise ObjectChangedError()
            data = bytes(answer.bytes())
        except PreconditionError:
            raise ObjectChangedError() from None
        except NotFoundError:
            raise ObjectChangedError() from None  # deleted since its HEAD
        except BaseError:
            raise TranscriptsUnavailableError() from None
        if len(data) != end - start:
            raise TranscriptsUnavailableError("the transcript store sent a truncated range")
        return data

    def read(self, info: ObjectInfo, length: int, offset: int) -> bytes:
        """[offset, offset + length) of that version, fewer at its end, through the cache."""
        end = min(info.size, offset + max(0, length))
        if offset < 0:
            raise ValueError("negative offset")
        if offset >= end:
            return b""
        first, last = offset // BLOCK_BYTES, (end - 1) // BLOCK_BYTES
        blocks: list[bytes] = []
        index = first
        while index <= last:
            block = self.cache.get((info.key, info.pin, index))
            if block is not None:
                blocks.append(block)
                index += 1
                continue
            # The run of missing blocks from here, in one GET.
            run_end = index + 1
            while run_end <= last and self.cache.get((info.key, info.pin, run_end)) is None:
                run_end += 1
            start = index * BLOCK_BYTES
            stop = min(info.size, run_end * BLOCK_BYTES)
            data = self.fetch(info, start, stop)
            for k in range(index, run_end):
                block = data[(k - index) * BLOCK_BYTES : (k - index + 1) * BLOCK_BYTES]
                self.cache.put((info.key, info.pin, k), block)
                blocks.append(block)
            index = run_end
        joined = blocks[0] if len(blocks) == 1 else b"".join(blocks)
        skip = offset - first * BLOCK_BYTES
        return joined[skip : skip + end - offset]


class ObjectSource(ByteSource):
    """One version of an object (as its HEAD found it), read by ranged GETs through the cache."""

    __slots__ = ("bucket", "info")

    def __init__(self, bucket: Bucket, info: ObjectInfo) -> None:
        self.bucket = bucket
        self.info = info

    def read(self, length: int, offset: int) -> bytes:
        """The bytes [offset, offset + length), fewer at the end of the object."""
        return self.bucket.read(self.info, length, offset)

    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int:
        """Read into `buffer` from `offset`; the count read, fewer at the end."""
        data = self.bucket.read(self.info, len(buffer), offset)
        buffer[: len(data)] = data
        return len(data)

    def stat(self) -> ObjectStat:
        """The object's size and times as opened."""
        return self.info.stat()

    def dup(self) -> ObjectSource:
        """A second handle on the same version."""
        return ObjectSource(self.bucket, self.info)

    def close(self) -> None:
        """Nothing is held open between requests."""
