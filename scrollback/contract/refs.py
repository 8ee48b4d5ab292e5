"""The codec for both reference forms (docs/contract.md §4), with validation.

- A session id: an id matching `[A-Za-z0-9_-]{1,64}`, or `<source>:<id>` naming
  the source too (`claude-code:`, `codex:`, `opencode:`, `gemini:`), as a session is listed when another
  source the caller sees has the same id (`split_session_id`).
- A transcript image: `<sessionId>/<entryUuid>/<index>`, ids matching
  `[A-Za-z0-9_-]{1,64}` (the session id in either form above), index a decimal 0-9999 with no sign or leading zeros,
  plus a pin (xxh3-128 of the raw payload text, 32 lowercase hex).
- A content-addressed blob: `media:<64 lowercase hex sha256>`, only that form.
- The entry of a line without a usable uuid (Codex rollouts have none) is named
  by its line's byte offset, `at-<offset>` (`entry_name`, `offset_of_entry_name`):
  a file only grows, so the name stays valid, and the pin guards against a
  rewrite that put other bytes there.

Anything else raises `RefError`, which services map to INVALID_ARGUMENT. Error
messages describe the problem, never echo the offending text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_IMAGE_INDEX = 9999
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The sources of sessions, in the order a bare session id is resolved in (the first wins).
CLAUDE_CODE = "claude-code"
CODEX = "codex"
OPENCODE = "opencode"
GEMINI = "gemini"
SESSION_SOURCES = (CLAUDE_CODE, CODEX, OPENCODE, GEMINI)
# Between a source and an id in a session id that names its source (`codex:<id>`).
SOURCE_SEPARATOR = ":"
_INDEX_PATTERN = re.compile(r"0|[1-9][0-9]{0,3}")
_PIN_PATTERN = re.compile(r"[0-9a-f]{32}")
_SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
BLOB_REF_PREFIX = "media:"
# An entry named by its line's byte offset: `at-` and a decimal without leading zeros.
OFFSET_NAME_PREFIX = "at-"
_OFFSET_NAME = re.compile(r"at-(0|[1-9][0-9]{0,17})")


class RefError(ValueError):
    """A reference, id, index, pin or digest that is not of the contract's form."""


def validate_id(value: str, what: str = "id") -> str:
    """Return `value` if it is a valid session id, entry uuid, chat key or txn id."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        raise RefError(f"{what} must match [A-Za-z0-9_-]{{1,64}}")
    return value


def split_session_id(value: str, what: str = "session id") -> tuple[str, str]:
    """(source, id) of a session id: ("", id) for a bare id, (source, id) for `<source>:<id>`."""
    if isinstance(value, str) and SOURCE_SEPARATOR in value:
        source, _, bare = value.partition(SOURCE_SEPARATOR)
        if source in SESSION_SOURCES and ID_PATTERN.fullmatch(bare) is not None:
            return source, bare
        raise RefError(f"{what} must be an id or <source>:<id> with a known source")
    return "", validate_id(value, what)


def is_session_id(value: str) -> bool:
    """True if `value` is a session id in either form (split_session_id)."""
    try:
        split_session_id(value)
    except RefError:
        return False
    return True


def validate_session_id(value: str, what: str = "session id") -> str:
    """Return `value` if it is a session id: an id, or `<source>:<id>` (split_session_id)."""
    split_session_id(value, what)
    return value


def validate_index(value: int) -> int:
    """Return `value` if it is an image index from 0 to 9999."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_IMAGE_INDEX:
        raise RefError(f"image index must be an integer from 0 to {MAX_IMAGE_INDEX}")
    return value


def validate_pin(value: str) -> str:
    """Return `value` if it is 32 lowercase hex characters."""
    if not isinstance(value, str) or _PIN_PATTERN.fullmatch(value) is None:
        raise RefError("pin must be 32 lowercase hex characters")
    return value


def validate_sha256(value: str) -> str:
    """Return `value` if it is 64 lowercase hex characters."""
    if not isinstance(value, str) or _SHA256_PATTERN.fullmatch(value) is None:
        raise RefError("sha256 must be 64 lowercase hex characters")
    return value


def offset_of_entry_name(name: str) -> int | None:
    """The byte offset an `at-<offset>` entry name stands for; None for any other name."""
    match = _OFFSET_NAME.fullmatch(name)
    return None if match is None else int(match.group(1))


def has_usable_uuid(uuid: str) -> bool:
    """True if a line's uuid can name its entry: an id, and not of the offset form."""
    return ID_PATTERN.fullmatch(uuid) is not None and _OFFSET_NAME.fullmatch(uuid) is None


def entry_name(uuid: str, offset: int) -> str:
    """How a ref names the entry of the line at `offset`: its uuid, else `at-<offset>`."""
    return uuid if has_usable_uuid(uuid) else f"{OFFSET_NAME_PREFIX}{offset}"


@dataclass(frozen=True, slots=True)
class TranscriptImageRef:
    """The image with `index` in the entry `entry_uuid` of session `session_id`."""

    session_id: str
    entry_uuid: str
    index: int

    def __post_init__(self) -> None:
        validate_session_id(self.session_id)
        validate_id(self.entry_uuid, "entry uuid")
        validate_index(self.index)

    def __str__(self) -> str:
        return f"{self.session_id}/{self.entry_uuid}/{self.index}"


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A content-addressed blob, named by the sha256 of its bytes."""

    sha256: str

    def __post_init__(self) -> None:
        validate_sha256(self.sha256)

    def __str__(self) -> str:
        return f"{BLOB_REF_PREFIX}{self.sha256}"


def parse_transcript_ref(text: str) -> TranscriptImageRef:
    """Parse `<sessionId>/<entryUuid>/<index>`; raise RefError otherwise."""
    if not isinstance(text, str):
        raise RefError("reference must be a string")
    parts = text.split("/")
    if len(parts) != 3:
        raise RefError("transcript reference must be <sessionId>/<entryUuid>/<index>")
    session_id, entry_uuid, index_text = parts
    if _INDEX_PATTERN.fullmatch(index_text) is None:
        raise RefError("image index must be a decimal from 0 to 9999 without sign or leading zeros")
    return TranscriptImageRef(session_id, entry_uuid, int(index_text))


def parse_blob_ref(text: str) -> BlobRef:
    """Parse `media:<64 lowercase hex>`; raise RefError otherwise."""
    if not isinstance(text, str) or not text.startswith(BLOB_REF_PREFIX):
        raise RefError("blob reference must be media:<64 lowercase hex sha256>")
    return BlobRef(text[len(BLOB_REF_PREFIX) :])


def parse_ref(text: str) -> TranscriptImageRef | BlobRef:
    """Parse either string form; raise RefError for anything else."""
    if isinstance(text, str) and text.startswith(BLOB_REF_PREFIX):
        return parse_blob_ref(text)
    return parse_transcript_ref(text)
