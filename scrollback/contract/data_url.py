"""Data URLs as payloads (docs/contract.md §3): the grammar, on parsed text and on raw bytes.

A JSON string value whose text, once its escapes are read, starts with
`data:<type>/<subtype>;base64,` holds its payload after that comma: the
stripper cuts the raw text after the comma (never the prefix) when it is at
least the inline limit and base64 characters only, exactly as it cuts a bare
base64 string. Codex CLI writes every image so; some MCP tools write them into
Claude Code transcripts too.

Both readings of the prefix live here, so the stripper (raw bytes, escapes as
written) and the image enumeration (parsed strings) agree on what a data URL
is: `split_data_url` on a parsed string and `data_url_payload_start` on the
raw text of the same string find the same prefix.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Callable

DATA_URL_SCHEME = "data:"
BASE64_MARKER = ";base64,"
# RFC 6838 restricted-name characters; each of type and subtype is at most 127 of them.
_NAME = r"[A-Za-z0-9!#$&^_.+-]{1,127}"
_DATA_URL = re.compile(rf"data:({_NAME}/{_NAME});base64,")
# The longest prefix the grammar allows, in characters once unescaped.
MAX_PREFIX_CHARS = len(DATA_URL_SCHEME) + 127 + 1 + 127 + len(BASE64_MARKER)
# ... and in raw bytes: every character could be written as a \uXXXX escape.
MAX_PREFIX_RAW = 6 * MAX_PREFIX_CHARS

_BACKSLASH = 0x5C
_QUOTE = 0x22
_SIMPLE_ESCAPES = {
    ord('"'): '"',
    ord("\\"): "\\",
    ord("/"): "/",
    ord("b"): "\b",
    ord("f"): "\f",
    ord("n"): "\n",
    ord("r"): "\r",
    ord("t"): "\t",
}
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _is_hex4(digits: bytes) -> bool:
    return len(digits) == 4 and all(b in _HEX for b in digits)


def split_data_url(text: str) -> tuple[str, str] | None:
    """(declared media type, payload text) of a parsed string that is a base64 data URL."""
    match = _DATA_URL.match(text)
    if match is None:
        return None
    return match.group(1), text[match.end() :]


def is_image_media_type(media_type: str) -> bool:
    """True for a declared `image/...` type (the data URLs that count as images)."""
    return media_type[:6].lower() == "image/"


def data_url_payload_start(read: Callable[[int, int], bytes], start: int) -> tuple[int, str]:
    """Where the payload of the string whose raw text starts at `start` begins, and its type.

    `read(offset, length)` gives raw bytes of the line (fewer at its end). The
    prefix is read escape by escape, at most MAX_PREFIX_RAW bytes, up to the
    first comma; (-1, "") when the string is not a base64 data URL (or ends
    first). Cheap on anything else: a base64 string fails at its first `:`.
    """
    head = read(start, MAX_PREFIX_RAW)
    if not head or (head[0] != ord("d") and head[0] != _BACKSLASH):
        return -1, ""
    chars: list[str] = []
    position = 0
    size = len(head)
    while position < size and len(chars) < MAX_PREFIX_CHARS:
        byte = head[position]
        if byte == _QUOTE or byte < 0x20 or byte >= 0x80:
            return -1, ""  # the string ended, or a character the grammar never holds
        if byte != _BACKSLASH:
            chars.append(chr(byte))
            position += 1
        else:
            kind = head[position + 1] if position + 1 < size else -1
            if kind in _SIMPLE_ESCAPES:
                chars.append(_SIMPLE_ESCAPES[kind])
                position += 2
            elif kind == ord("u") and _is_hex4(head[position + 2 : position + 6]):
                chars.append(chr(int(head[position + 2 : position + 6], 16)))
                position += 6
            else:
                return -1, ""
        if chars[-1] == ",":
            match = _DATA_URL.fullmatch("".join(chars))
            if match is None:
                return -1, ""
            return start + position, match.group(1)
    return -1, ""


def bytes_reader(line: bytes | mmap.mmap) -> Callable[[int, int], bytes]:
    """A `read` over a held line (bytes or a memory map of it)."""

    def read(offset: int, length: int) -> bytes:
        return bytes(line[offset : offset + length])

    return read
