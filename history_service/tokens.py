"""Opaque page tokens, listing tokens and watch positions.

A token is base64url (no padding) of a small binary structure sealed with
AES-SIV (RFC 5297: a 16-byte synthetic IV, which is also its tag, then the
ciphertext) under a key derived from the one kept in the state dir, with its
kind and scope (the session id, or the caller's namespace) as associated
data. So a token can neither be forged nor moved to another session, and it
shows the client nothing of what it holds (file identities, offsets, the
server-wide sequence number of accepted messages, which would tell one tenant
how much the others send); being deterministic, the same position still
gives the same token. A letter goes first (`_PREFIX`), so that no token
starts with "-" and looks like an option on a command line. Anything that
does not open is INVALID_ARGUMENT.

A transcript token names the file version it was minted for (a
scrollback.linefile `FileIdentity`: the `FileVersion`, i.e. device, inode, the
length and xxh3 hash of the file's first bytes, and its size at minting) and a
byte boundary that is always a line start. It stays valid while the file only
grows; `FileIdentity.check` refuses it once the file was rewritten or truncated. A page token also carries the xxh3 hash of
the bytes around its own boundary (up to 4 KiB before it and 4 KiB after it,
as far as the file went at minting), so a rewrite that keeps the size and the
first bytes but changes the text where the next page starts is refused too.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import xxhash
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from history_service.errors import FileRewrittenError, InvalidArgumentError
from history_service.search.store import Order, Page
from scrollback.history.v1 import history_pb2
from scrollback.linefile import ByteSource, FileIdentity, FileVersion, LineFile

KEY_FILE_NAME = "history-token.key"
_TAG_BYTES = 16
_SEAL_KEY_LABEL = b"scrollback token seal v1\0"
# Before the base64url: no token starts with "-" (a command-line option) or "_".
_PREFIX = "t"
_VERSION = 1
# kind, dev, ino, head_len, head_hash, size
_IDENTITY = struct.Struct(">QQHQQ")
_PAGE = struct.Struct(">BB")  # version, direction
# Page tokens carry a boundary mark since version 2 (mark length, mark hash).
_PAGE_VERSION = 2
_MARK = struct.Struct(">HQ")
MARK_BYTES = 4096
_POSITION_TAIL = struct.Struct(">QQ")  # offset, last_seq
_BOUNDARY = struct.Struct(">Q")

# The proto's ReadDirection values (a token stores the number, one byte).
DIRECTION_LATEST_FIRST: int = history_pb2.READ_DIRECTION_LATEST_FIRST
DIRECTION_OLDEST_FIRST: int = history_pb2.READ_DIRECTION_OLDEST_FIRST
_KIND_PAGE = b"P"
_KIND_POSITION = b"W"
_KIND_LIST = b"L"
_KIND_SEARCH = b"S"
# version, order, watermark (0: none), the last key served (newest) or hits looked at
_SEARCH = struct.Struct(">BBQq")


def _unpack_identity(body: bytes, offset: int) -> FileIdentity:
    dev, ino, head_len, head_hash, size = _IDENTITY.unpack_from(body, offset)
    return FileIdentity(FileVersion(dev, ino, head_len, head_hash), size)


@dataclass(frozen=True, slots=True)
class PageToken:
    """Where the next page of a window starts (or ends, latest-first).

    `mark_len` and `mark_hash` describe the file's bytes from
    `max(0, boundary - MARK_BYTES)` on, as they were at minting.
    """

    direction: int
    identity: FileIdentity
    boundary: int
    mark_len: int = 0
    mark_hash: int = 0

    @staticmethod
    def _mark_start(boundary: int) -> int:
        return max(0, boundary - MARK_BYTES)

    @classmethod
    def at(cls, direction: int, identity: FileIdentity, boundary: int, fd: ByteSource) -> PageToken:
        """A token for `boundary` in this file version, marked with the bytes around it."""
        start = cls._mark_start(boundary)
        end = min(identity.size, boundary + MARK_BYTES)
        mark = LineFile(fd).read(max(0, end - start), start)
        return cls(direction, identity, boundary, len(mark), xxhash.xxh3_64_intdigest(mark))

    def check_mark(self, fd: ByteSource) -> None:
        """FileRewrittenError unless the bytes around the boundary are as at minting."""
        mark = LineFile(fd).read(self.mark_len, self._mark_start(self.boundary))
        if len(mark) != self.mark_len or xxhash.xxh3_64_intdigest(mark) != self.mark_hash:
            raise FileRewrittenError()


@dataclass(frozen=True, slots=True)
class WatchPosition:
    """Where a watch continues: a file version, a byte offset and the last accepted seq."""

    identity: FileIdentity
    offset: int
    last_seq: int


def load_or_create_key(state_dir: Path) -> bytes:
    """The token key of this state dir, created (0600) on first use."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / KEY_FILE_NAME
    try:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    except FileNotFoundError:
        pass
    key = os.urandom(32)
    # A unique temp name and link(), not replace(): replicas sharing the state dir
    # that start at once agree on the first key written instead of each keeping its own.
    temp = path.with_name(f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)
    except FileExistsError:
        existing = path.read_bytes()
        if len(existing) < 32:  # a torn key from an old crash: replace it
            os.replace(temp, path)
            return key
        return existing
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return key


class TokenCodec:
    """Mints and verifies tokens under one key."""

    def __init__(self, key: bytes) -> None:
        # A key of its own for sealing (AES-256-SIV takes 64 bytes), derived from the
        # state dir's key file.
        self._aead = AESSIV(hashlib.sha512(_SEAL_KEY_LABEL + key).digest())

    def _seal(self, kind: bytes, scope: str, body: bytes) -> str:
        sealed = self._aead.encrypt(body, [kind, scope.encode()])
        return _PREFIX + base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    def _open(self, kind: bytes, scope: str, token: str, what: str) -> bytes:
        error = InvalidArgumentError(f"malformed {what}")
        if (
            not isinstance(token, str)
            or not token.isascii()
            or len(token) > 512
            or not token.startswith(_PREFIX)
        ):
            raise error
        encoded = token[len(_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            raise error from None
        if len(raw) < _TAG_BYTES:
            raise error
        try:
            return self._aead.decrypt(raw, [kind, scope.encode()])
        except InvalidTag:
            raise error from None

    @staticmethod
    def _pack_identity(identity: FileIdentity) -> bytes:
        version = identity.version
        return _IDENTITY.pack(
            version.dev, version.ino, version.head_len, version.head_hash, identity.size
        )

    def page_token(self, session_id: str, token: PageToken) -> str:
        """Mint a page token for a session."""
        body = (
            _PAGE.pack(_PAGE_VERSION, token.direction)
            + self._pack_identity(token.identity)
            + _BOUNDARY.pack(token.boundary)
            + _MARK.pack(token.mark_len, token.mark_hash)
        )
        return self._seal(_KIND_PAGE, session_id, body)

    def parse_page_token(self, session_id: str, token: str) -> PageToken:
        """Verify and decode a page token; InvalidArgumentError if it is not ours."""
        body = self._open(_KIND_PAGE, session_id, token, "page token")
        if len(body) != _PAGE.size + _IDENTITY.size + _BOUNDARY.size + _MARK.size:
            raise InvalidArgumentError("malformed page token")
        version, direction = _PAGE.unpack_from(body, 0)
        if version != _PAGE_VERSION or direction not in (
            DIRECTION_LATEST_FIRST,
            DIRECTION_OLDEST_FIRST,
        ):
            raise InvalidArgumentError("malformed page token")
        identity = _unpack_identity(body, _PAGE.size)
        (boundary,) = _BOUNDARY.unpack_from(body, _PAGE.size + _IDENTITY.size)
        mark_len, mark_hash = _MARK.unpack_from(body, _PAGE.size + _IDENTITY.size + _BOUNDARY.size)
        if boundary > identity.size or mark_len > 2 * MARK_BYTES:
            raise InvalidArgumentError("malformed page token")
        return PageToken(direction, identity, boundary, mark_len, mark_hash)

    def position(self, scope: str, position: WatchPosition) -> str:
        """Mint a watch position (scope: the session id, or `key:<chat key>`)."""
        body = (
            bytes([_VERSION])
            + self._pack_identity(position.identity)
            + _POSITION_TAIL.pack(position.offset, position.last_seq)
        )
        return self._seal(_KIND_POSITION, scope, body)

    def parse_position(self, scope: str, token: str) -> WatchPosition:
        """Verify and decode a watch position; InvalidArgumentError if it is not ours."""
        body = self._open(_KIND_POSITION, scope, token, "watch position")
        if len(body) != 1 + _IDENTITY.size + _POSITION_TAIL.size or body[0] != _VERSION:
            raise InvalidArgumentError("malformed watch position")
        identity = _unpack_identity(body, 1)
        offset, last_seq = _POSITION_TAIL.unpack_from(body, 1 + _IDENTITY.size)
        if offset > identity.size and not identity.is_null:
            raise InvalidArgumentError("malformed watch position")
        return WatchPosition(identity, offset, last_seq)

    def list_token(self, sort_key: tuple[int, str, str]) -> str:
        """Mint a ListSessions token: the sort key of the last session listed."""
        mtime_ns, project, session = sort_key
        body = struct.pack(">Q", mtime_ns) + project.encode() + b"\0" + session.encode()
        return self._seal(_KIND_LIST, "", body)

    def parse_list_token(self, token: str) -> tuple[int, str, str]:
        """Verify and decode a ListSessions token."""
        body = self._open(_KIND_LIST, "", token, "page token")
        try:
            (mtime_ns,) = struct.unpack_from(">Q", body, 0)
            project, session = body[8:].decode().split("\0")
        except (struct.error, UnicodeDecodeError, ValueError):
            raise InvalidArgumentError("malformed page token") from None
        return mtime_ns, project, session

    def search_token(self, scope: str, page: Page) -> str:
        """Mint a Search page token: where the next page starts."""
        position = page.before_key if page.order == Order.NEWEST else page.offset
        body = _SEARCH.pack(_VERSION, page.order, page.watermark or 0, position or 0)
        return self._seal(_KIND_SEARCH, scope, body)

    def parse_search_token(self, scope: str, token: str, order: Order) -> Page:
        """Verify and decode a Search page token (scope: the caller's namespace) minted
        for a search in `order`."""
        body = self._open(_KIND_SEARCH, scope, token, "page token")
        if len(body) != _SEARCH.size or body[0] != _VERSION:
            raise InvalidArgumentError("malformed page token")
        _, kind, watermark, position = _SEARCH.unpack(body)
        if kind != order:
            raise InvalidArgumentError("page token is of a search in another order")
        if order == Order.NEWEST:
            return Page(order, watermark or None, before_key=position)
        if position < 0:
            raise InvalidArgumentError("malformed page token")
        return Page(order, watermark or None, offset=position)
