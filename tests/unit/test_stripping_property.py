"""Property test: `strip_line` and `extract_image` against an independent reference.

The reference shares no code with the stripper. It parses the whole original
line with a small recursive-descent JSON parser written here, which records
the raw byte span (escapes as written) of every string; then it applies
docs/contract.md §2-4 literally:

- a payload is a string VALUE (never a key) whose raw text is at least the
  inline limit in bytes and whose characters, once unescaped, are all in
  `A-Za-z0-9+/=`; it is cut by replacing exactly its raw text with the marker;
- image i is the i-th object with "type" == "image" in a pre-order walk of
  `message.content`, descending into the `content` array of any block;
- an image whose `source.data` was cut gets a ref: (index, pin = xxh3-128 of
  the raw text, declared media type); `data == ""` is a failed upload;
- the image's bytes are the base64 decoding of the unescaped payload.

Lines are generated to cover the shapes the contract names: key orders,
compact/spaced/messy whitespace, images nested in tool_result content (and
deeper), several images per entry, documents, toolUseResult copies, `\\/` and
`\\uXXXX` escapes in payloads, prose that mentions `"data":"<base64>`, a key
ending in `\\"data`, non-ASCII and lone-surrogate text, failed uploads,
payloads of exactly limit-1, limit and limit+1 raw bytes, long base64 used as
a key, long base64 outside message.content, runs of the limit without a quote
outside any string (a number array, spaces), lines without uuid, image blocks
without source, and decoys that are not walked (tool_use input, arrays nested
directly in arrays, attachment.prompt).

Data URLs (§3): a string value whose text is `data:<type>/<subtype>;base64,`
and a payload has that payload cut (the raw text after the comma), whatever
escapes the prefix is written with; near misses of the prefix are prose. In a
rollout line (a `payload` object, no `message` member) image i is the i-th
`image/...` data URL string in a pre-order walk of `payload`; in a Claude Code
line a data URL is cut but is never an image.
"""

from __future__ import annotations

import base64
import binascii
import json
import mmap
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
import xxhash
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from scrollback.contract.blocks import iter_objects, matching_spans, top_level_string_span
from scrollback.contract.extraction import (
    ImageNotFoundError,
    ImageNotStrippedError,
    UndecodablePayloadError,
    extract_image,
)
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER
from scrollback.contract.stripping import (
    DEFAULT_INLINE_LIMIT,
    DEFAULT_MAX_LINE_SIZE,
    MIN_INLINE_LIMIT,
    find_payload_spans,
    pin_of,
    probe_line,
    probe_line_streamed,
    strip_line,
)
from scrollback.contract.top_level import TOP_LEVEL_WINDOW

MARKER = STRIPPED_MEDIA_MARKER.encode("ascii")
B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")

# =============================================================================
# The reference: an independent JSON parser that records raw string spans.
# =============================================================================


class RawStr(str):
    """A decoded JSON string value that remembers where its raw text was."""

    start: int
    end: int


class RefJSONError(ValueError):
    pass


_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
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
_WHITESPACE = b" \t\r\n"


class ReferenceParser:
    """Strict RFC 8259 recursive descent over bytes; string values become RawStr."""

    def __init__(self, text: bytes) -> None:
        self.text = text
        self.pos = 0
        self.value_strings: list[RawStr] = []

    def parse(self) -> Any:
        self._skip()
        value = self._value()
        self._skip()
        if self.pos != len(self.text):
            raise RefJSONError("trailing data")
        return value

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
            self.pos += 1

    def _peek(self) -> int:
        if self.pos >= len(self.text):
            raise RefJSONError("unexpected end")
        return self.text[self.pos]

    def _expect(self, char: bytes) -> None:
        if self.text[self.pos : self.pos + 1] != char:
            raise RefJSONError(f"expected {char!r} at {self.pos}")
        self.pos += 1

    def _value(self) -> Any:
        char = self._peek()
        if char == ord("{"):
            return self._object()
        if char == ord("["):
            return self._array()
        if char == ord('"'):
            value = self._string()
            self.value_strings.append(value)
            return value
        for literal, result in ((b"true", True), (b"false", False), (b"null", None)):
            if self.text.startswith(literal, self.pos):
                self.pos += len(literal)
                return result
        match = _NUMBER.match(self.text, self.pos)
        if match is None or match.end() == self.pos:
            raise RefJSONError(f"unexpected byte at {self.pos}")
        self.pos = match.end()
        number = match.group()
        return float(number) if any(c in number for c in b".eE") else int(number)

    def _object(self) -> dict[str, Any]:
        self._expect(b"{")
        result: dict[str, Any] = {}
        self._skip()
        if self._peek() == ord("}"):
            self.pos += 1
            return result
        while True:
            self._skip()
            key = str(self._string())  # a key: a plain str, never a candidate
            self._skip()
            self._expect(b":")
            self._skip()
            result[key] = self._value()
            self._skip()
            if self._peek() == ord(","):
                self.pos += 1
                continue
            self._expect(b"}")
            return result

    def _array(self) -> list[Any]:
        self._expect(b"[")
        result: list[Any] = []
        self._skip()
        if self._peek() == ord("]"):
            self.pos += 1
            return result
        while True:
            self._skip()
            result.append(self._value())
            self._skip()
            if self._peek() == ord(","):
                self.pos += 1
                continue
            self._expect(b"]")
            return result

    def _hex4(self, at: int) -> int:
        digits = self.text[at : at + 4]
        if len(digits) != 4 or not all(c in b"0123456789abcdefABCDEF" for c in digits):
            raise RefJSONError("bad \\u escape")
        return int(digits, 16)

    def _string(self) -> RawStr:
        self._expect(b'"')
        start = self.pos
        text = self.text
        chars: list[str] = []
        while True:
            if self.pos >= len(text):
                raise RefJSONError("unterminated string")
            char = text[self.pos]
            if char == ord('"'):
                break
            if char < 0x20:
                raise RefJSONError("control character in string")
            if char == ord("\\"):
                kind = text[self.pos + 1] if self.pos + 1 < len(text) else -1
                if kind in _SIMPLE_ESCAPES:
                    chars.append(_SIMPLE_ESCAPES[kind])
                    self.pos += 2
                elif kind == ord("u"):
                    code = self._hex4(self.pos + 2)
                    self.pos += 6
                    if 0xD800 <= code < 0xDC00 and text.startswith(b"\\u", self.pos):
                        low = self._hex4(self.pos + 2)
                        if 0xDC00 <= low < 0xE000:
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                            self.pos += 6
                    chars.append(chr(code))
                else:
                    raise RefJSONError("bad escape")
                continue
            run_end = self.pos
            while (
                run_end < len(text) and text[run_end] not in (0x22, 0x5C) and text[run_end] >= 0x20
            ):
                run_end += 1
            chars.append(text[self.pos : run_end].decode("utf-8"))  # strict UTF-8
            self.pos = run_end
        value = RawStr("".join(chars))
        value.start = start
        value.end = self.pos
        self.pos += 1
        return value


@dataclass(frozen=True)
class RefImage:
    index: int
    pin: str
    media_type: str
    raw_start: int
    raw_end: int
    decoded: bytes | None  # None: base64 characters, but not valid base64


@dataclass
class Reference:
    """What the contract says `strip_line(line, limit)` must produce."""

    value: Any
    cut_spans: list[tuple[int, int]]
    stripped: bytes
    stripped_value: Any
    images: list[RefImage]
    failed: list[int]
    image_count: int
    uuid: str
    image_data: list[Any] = field(default_factory=list)  # source.data of each image, or None


_REF_DATA_URL = re.compile(
    r"data:([A-Za-z0-9!#$&^_.+-]{1,127}/[A-Za-z0-9!#$&^_.+-]{1,127});base64,"
)


def _raw_after_chars(line: bytes, start: int, chars: int) -> int:
    """The raw offset reached after reading `chars` characters of the string at `start`."""
    position = start
    for _ in range(chars):
        if line[position] != ord("\\"):
            # one UTF-8 character (the prefix is ASCII, so one byte)
            position += 1
        elif line[position + 1] == ord("u"):
            position += 6
        else:
            position += 2
    return position


@dataclass(frozen=True)
class RefString:
    """A string value seen as the contract sees it: where its payload is, if anywhere."""

    payload: str  # the text a payload would be (after a data URL's comma, else the whole)
    start: int  # raw offset of that text
    end: int
    media_type: str | None  # a data URL's declared type; None for a plain string


def _ref_string(line: bytes, value: RawStr) -> RefString:
    match = _REF_DATA_URL.match(value)
    if match is None:
        return RefString(str(value), value.start, value.end, None)
    start = _raw_after_chars(line, value.start, match.end())
    return RefString(value[match.end() :], start, value.end, match.group(1))


def _is_payload(string: RefString, limit: int) -> bool:
    return string.end - string.start >= limit and all(c in B64_ALPHABET for c in string.payload)


def _replace_cut(value: Any, cut: dict[tuple[int, int], str]) -> Any:
    if isinstance(value, RawStr):
        return cut.get((value.start, value.end), str(value))
    if isinstance(value, dict):
        return {k: _replace_cut(v, cut) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_cut(v, cut) for v in value]
    return value


def _walk_data_urls(line: bytes, payload: Any) -> list[tuple[Any, Any, RefString]]:
    """A rollout line's images, recursively: image data URLs in a pre-order walk of payload."""
    found: list[tuple[Any, Any, RefString]] = []

    def visit(value: Any) -> None:
        if isinstance(value, RawStr):
            string = _ref_string(line, value)
            if string.media_type is not None and string.media_type.lower().startswith("image/"):
                found.append((string.payload, string.media_type, string))
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(payload)
    return found


def _walk_all_images(line: bytes, entry: Any) -> list[tuple[Any, Any, RefString | None]]:
    """(payload text, media type, where) of each image: §2, or a rollout line's data URLs."""
    if (
        isinstance(entry, dict)
        and "message" not in entry
        and isinstance(entry.get("payload"), dict)
    ):
        return list(_walk_data_urls(line, entry["payload"]))
    images: list[tuple[Any, Any, RefString | None]] = []
    for block in _walk_images(entry):
        source = block.get("source")
        data = source.get("data") if isinstance(source, dict) else None
        media_type = source.get("media_type") if isinstance(source, dict) else None
        where = (
            RefString(str(data), data.start, data.end, None) if isinstance(data, RawStr) else None
        )
        images.append((data, media_type, where))
    return images


def _walk_images(entry: Any) -> list[dict[str, Any]]:
    """docs/contract.md §2, recursively: pre-order over message.content."""
    found: list[dict[str, Any]] = []

    def visit(blocks: list[Any]) -> None:
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                found.append(block)
            if isinstance(block.get("content"), list):
                visit(block["content"])

    message = entry.get("message") if isinstance(entry, dict) else None
    if isinstance(message, dict) and isinstance(message.get("content"), list):
        visit(message["content"])
    return found


def _decode(value: str) -> bytes | None:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except binascii.Error:
        return None


def reference(line: bytes, limit: int) -> Reference | None:
    """The expected result of strip_line(line, limit); None if not an object."""
    parser = ReferenceParser(line)
    try:
        value = parser.parse()
    except (RefJSONError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    replaced: dict[tuple[int, int], str] = {}
    cut: list[tuple[int, int]] = []
    for value_string in parser.value_strings:
        string = _ref_string(line, value_string)
        if _is_payload(string, limit):
            cut.append((string.start, string.end))
            prefix = value_string[: len(value_string) - len(string.payload)]
            replaced[(value_string.start, value_string.end)] = prefix + STRIPPED_MEDIA_MARKER
    cut.sort()
    pieces: list[bytes] = []
    previous = 0
    for start, end in cut:
        pieces += [line[previous:start], MARKER]
        previous = end
    pieces.append(line[previous:])
    cut_set = set(cut)

    images: list[RefImage] = []
    failed: list[int] = []
    found = _walk_all_images(line, value)
    data_values: list[Any] = []
    for index, (data, media_type, where) in enumerate(found):
        data_values.append(data)
        if data == "":
            failed.append(index)
        elif where is not None and (where.start, where.end) in cut_set:
            images.append(
                RefImage(
                    index=index,
                    pin=xxhash.xxh3_128_hexdigest(line[where.start : where.end]),
                    media_type=media_type if isinstance(media_type, str) else "",
                    raw_start=where.start,
                    raw_end=where.end,
                    decoded=_decode(where.payload),
                )
            )
    uuid = value.get("uuid")
    return Reference(
        value=value,
        cut_spans=cut,
        stripped=b"".join(pieces),
        stripped_value=_replace_cut(value, replaced),
        images=images,
        failed=failed,
        image_count=len(found),
        uuid=uuid if isinstance(uuid, str) else "",
        image_data=data_values,
    )


def test_reference_parser_agrees_with_json_module() -> None:
    """The reference parser itself: same values as json.loads, exact spans."""
    line = (
        '{"a": [1, -2.5e3, true, false, null, {}], "b\\"c": "x\\/y\\u00e9\\ud83d\\ude00\\ud800",'
        ' "\u65e5": "\u65e5\u672c", "d":""}'
    ).encode()
    parser = ReferenceParser(line)
    value = parser.parse()
    assert value == json.loads(line)
    for s in parser.value_strings:
        assert json.loads(b'"' + line[s.start : s.end] + b'"') == s
    assert [str(s) for s in parser.value_strings] == [
        "x/y\u00e9\U0001f600\ud800",
        "\u65e5\u672c",
        "",
    ]
    for bad in (
        b"{",
        b'{"a":1',
        b'{"a":01}',
        b"{'a':1}",
        b'{"a":1,}',
        b"[1] 2",
        b'{"a":"\xff"}',
        b"",
    ):
        with pytest.raises((RefJSONError, UnicodeDecodeError)):
            ReferenceParser(bad).parse()


# =============================================================================
# The generator: a small JSON AST whose string raw text is chosen exactly.
# =============================================================================


@dataclass
class JStr:
    raw: bytes  # the text between the quotes, escapes as written


@dataclass
class JLit:
    text: bytes


@dataclass
class JArr:
    items: list[Any]


@dataclass
class JObj:
    pairs: list[tuple[JStr, Any]]


MEDIA_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"]
ENTRY_TYPES = [
    "user",
    "assistant",
    "system",
    "summary",
    "queue-operation",
    "attachment",
    "progress",
]
SAFE_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]),
    max_size=12,
)
SHORT_ASCII = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


def _json_raw(text: str, ascii_only: bool) -> bytes:
    return json.dumps(text, ensure_ascii=ascii_only)[1:-1].encode("utf-8")


def _u_escape(char: str, upper: bool) -> bytes:
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair
        code -= 0x10000
        return _u_escape(chr(0xD800 + (code >> 10)), upper) + _u_escape(
            chr(0xDC00 + (code & 0x3FF)), upper
        )
    digits = f"{code:04x}"
    return b"\\u" + (digits.upper() if upper else digits).encode("ascii")


class Gen:
    """Draws one entry; remembers payloads so toolUseResult can copy one."""

    def __init__(self, draw: Any, limit: int) -> None:
        self.draw = draw
        self.limit = limit
        self.payload_raws: list[bytes] = []

    def rare(self, n: int) -> bool:
        """True about once in n draws; shrinks to False (the common case)."""
        return bool(self.draw(st.integers(0, n - 1)) == n - 1)

    # -- strings ---------------------------------------------------------

    def s(self, text: str) -> JStr:
        """A short string (key or value), sometimes with its chars \\u-escaped."""
        mode = self.draw(st.sampled_from(["plain", "plain", "ascii", "escape-some"]))
        if mode == "escape-some" and text:
            flags = self.draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
            raw = b"".join(
                _u_escape(c, upper=f) if f or c in '"\\' or ord(c) < 0x20 else c.encode("utf-8")
                for c, f in zip(text, flags, strict=True)
            )
            return JStr(raw)
        return JStr(_json_raw(text, ascii_only=mode == "ascii"))

    def payload(self, allow_empty: bool = True) -> bytes:
        """The raw text of a base64 payload (maybe small, maybe escaped, maybe invalid)."""
        kinds = ["above", "boundary", "above", "boundary", "small", "junk"]
        kinds += ["empty"] if allow_empty else []
        kind = self.draw(st.sampled_from(kinds), label="payload kind")
        rng = random.Random(self.draw(st.integers(0, 2**32 - 1), label="payload seed"))
        limit = self.limit
        if kind == "empty":
            return b""
        if kind == "junk":
            # Base64 characters, but never valid base64: still a payload when long enough.
            length = self.draw(st.sampled_from([limit - 1, limit, limit + 1, limit + 3, 5, 6, 7]))
            if self.draw(st.booleans()):
                # valid base64 with its padding torn off
                size = length * 3 // 4
                return base64.b64encode(rng.randbytes(size + (size % 3 == 0))).rstrip(b"=")
            text = bytes(rng.choice(b"ABCxyz019+/") for _ in range(length))
            return text if len(text) % 4 else text + b"A"
        if kind == "boundary":
            # Exactly limit-1, limit or limit+1 raw bytes of VALID base64, reached
            # with \u00XX escapes (each adds 5 bytes): 5e + u == target, u % 4 == 0.
            target = limit + self.draw(st.sampled_from([0, -1, 1, 0, -1, 1, -2, 2]), label="offset")
            escapes = target % 4 + 4 * self.draw(st.integers(0, 1))
            unescaped = target - 5 * escapes
            pad = self.draw(st.integers(0, 2))
            data = base64.b64encode(rng.randbytes(3 * unescaped // 4 - pad))
            assert len(data) == unescaped
            positions = set(rng.sample(range(unescaped), escapes))
            raw = b"".join(
                _u_escape(chr(c), upper=rng.random() < 0.5) if i in positions else bytes([c])
                for i, c in enumerate(data)
            )
            assert len(raw) == target
            return raw
        if kind == "small":
            data = base64.b64encode(rng.randbytes(self.draw(st.integers(1, 40))))
        else:  # "above"
            size = self.draw(st.integers(limit * 3 // 4, limit * 3 // 4 + 1200), label="size")
            data = base64.b64encode(rng.randbytes(size))
        n_escapes = self.draw(st.sampled_from([0, 0, 1, 3]))
        slashes = [i for i, c in enumerate(data) if c == ord("/")]
        pool = slashes if slashes and rng.random() < 0.5 else range(len(data))
        positions = set(rng.sample(pool, min(n_escapes, len(pool))))
        out = []
        for i, c in enumerate(data):
            if i not in positions:
                out.append(bytes([c]))
            elif c == ord("/") and rng.random() < 0.6:
                out.append(b"\\/")
            else:
                out.append(_u_escape(chr(c), upper=rng.random() < 0.5))
        # `\/` is frequent in real escaping writers: escape every slash sometimes.
        raw = b"".join(out)
        if self.rare(10):
            raw = raw.replace(b"\\/", b"/").replace(b"/", b"\\/")
        return raw

    def data_url(self, media_type: str | None = None) -> JStr:
        """A data URL string: its prefix sometimes escaped, sometimes not quite a data URL."""
        if media_type is None:
            media_type = self.draw(st.sampled_from([*MEDIA_TYPES, "application/pdf", "IMAGE/PNG"]))
        prefix = f"data:{media_type};base64,"
        kind = self.draw(st.sampled_from(["plain", "plain", "slash", "u-escapes", "broken"]))
        if kind == "slash":
            raw_prefix = prefix.replace("/", "\\/").encode("ascii")
        elif kind == "u-escapes":
            flags = self.draw(st.lists(st.booleans(), min_size=len(prefix), max_size=len(prefix)))
            raw_prefix = b"".join(
                _u_escape(c, upper=False) if f else c.encode("ascii")
                for c, f in zip(prefix, flags, strict=True)
            )
        elif kind == "broken":
            broken = self.draw(
                st.sampled_from(
                    [
                        f"data:{media_type};base64;",
                        f"data:{media_type},",
                        f"Data:{media_type};base64,",
                        f"data:{media_type}/x;base64,",
                        "data:;base64,",
                        f"xdata:{media_type};base64,",
                    ]
                )
            )
            raw_prefix = broken.encode("ascii")
        else:
            raw_prefix = prefix.encode("ascii")
        raw = self.payload()
        if raw:
            self.payload_raws.append(raw)
        return JStr(raw_prefix + raw)

    def rollout_value(self, depth: int) -> Any:
        """Something under a rollout line's payload: images as data URLs at any depth."""
        kinds = ["data-url", "data-url", "prose", "number"]
        if depth < 3:
            kinds += ["object", "object", "array"]
        kind = self.draw(st.sampled_from(kinds))
        if kind == "data-url":
            return self.data_url()
        if kind == "prose":
            return self.prose()
        if kind == "number":
            return JLit(b"7")
        if kind == "array":
            count = self.draw(st.integers(0, 3))
            return JArr([self.rollout_value(depth + 1) for _ in range(count)])
        count = self.draw(st.integers(0, 3))
        pairs: list[tuple[str | JStr, Any]] = [("type", self.s("input_image"))]
        names = ["image_url", "output", "content", "images", "summary"]
        for name in self.draw(st.permutations(names))[:count]:
            pairs.append((name, self.rollout_value(depth + 1)))
        return self.obj(pairs)

    def rollout_entry(self) -> JObj:
        """A Codex rollout line: timestamp, type, payload (and rarely a `message` as well)."""
        kind = self.draw(st.sampled_from(["response_item", "event_msg", "compacted", "x-new"]))
        payload = self.rollout_value(0)
        if not isinstance(payload, JObj) or self.rare(10):
            payload = self.obj([("type", self.s("message")), ("content", JArr([payload]))])
        pairs: list[tuple[str | JStr, Any]] = [
            ("timestamp", self.s("2025-01-02T03:04:05.678Z")),
            ("type", self.s(kind)),
            ("payload", payload),
        ]
        if self.rare(10):
            # a message member makes it a Claude Code entry: payload is not walked
            pairs.append(("message", self.obj([("content", self.blocks(0))])))
        return self.obj(pairs)

    def long_b64(self) -> bytes:
        rng = random.Random(self.draw(st.integers(0, 2**32 - 1)))
        return base64.b64encode(rng.randbytes(self.limit * 3 // 4 + rng.randint(0, 60)))

    def prose(self) -> JStr:
        """A string value that is never a payload."""
        kind = self.draw(
            st.sampled_from(
                [
                    "text",
                    "mention",
                    "mention-spaced",
                    "b64+space",
                    "b64+newline",
                    "b64+backslash",
                    "b64+quote",
                    "surrogate",
                    "b64+unicode",
                ]
            )
        )
        if kind == "text":
            text = self.draw(SAFE_TEXT)
            return JStr(_json_raw(text, ascii_only=self.draw(st.booleans())))
        long = self.long_b64().decode("ascii")
        if kind == "mention":
            return JStr(_json_raw(f'look: {{"type":"image","source":{{"data":"{long}"}}}}', True))
        if kind == "mention-spaced":
            return JStr(_json_raw(f'"data": "{long}"', True))
        if kind == "b64+space":
            return JStr((long[:100] + " " + long[100:]).encode("ascii"))
        if kind == "b64+newline":
            return JStr(long.encode("ascii") + b"\\n")
        if kind == "b64+backslash":
            # ends with an escaped backslash: the closing quote follows `\\`
            return JStr(long.encode("ascii") + b"\\\\")
        if kind == "b64+quote":
            return JStr(long[:50].encode("ascii") + b'\\"' + long[50:].encode("ascii"))
        if kind == "b64+unicode":
            return JStr(long.encode("ascii") + "\u00e9".encode())
        return JStr(b"lone \\ud800 surrogate, then \\udc00 and a pair \\ud83d\\ude00")

    # -- blocks ----------------------------------------------------------

    def obj(self, pairs: list[tuple[str | JStr, Any]]) -> JObj:
        ordered = self.draw(st.permutations(pairs))
        return JObj([(k if isinstance(k, JStr) else self.s(k), v) for k, v in ordered])

    def media_block(self, block_type: str, media_type: str, depth: int = 3) -> JObj:
        source: list[tuple[str | JStr, Any]] = []
        if not self.rare(10):
            source.append(("type", self.s("base64")))
        if not self.rare(10):
            source.append(("media_type", self.s(media_type)))
        if self.rare(20):
            source.append(("data", JLit(b"null")))
        elif not self.rare(20):  # else: no data key at all
            raw = self.payload()
            if raw:
                self.payload_raws.append(raw)
            source.append(("data", JStr(raw)))
        pairs: list[tuple[str | JStr, Any]] = [("type", self.s(block_type))]
        if not self.rare(10):
            pairs.append(("source", self.obj(source)))
        if depth < 3 and self.rare(8):
            # an image block that has a content array itself: pre-order, it counts first
            pairs.append(("content", self.blocks(depth + 1)))
        if self.rare(6):
            pairs.append(("cache_control", self.obj([("type", self.s("ephemeral"))])))
        return self.obj(pairs)

    def image(self, depth: int = 3) -> JObj:
        return self.media_block("image", self.draw(st.sampled_from(MEDIA_TYPES)), depth)

    def blocks(self, depth: int) -> JArr:
        count = self.draw(st.integers(1 if depth == 0 else 0, 4 if depth == 0 else 3))
        return JArr([self.block(depth) for _ in range(count)])

    def block(self, depth: int) -> Any:
        kinds = ["image", "image", "image", "text", "document", "tool_use", "non-object", "url"]
        if depth < 3:
            kinds += ["tool_result", "tool_result", "tool_result", "container"]
        kind = self.draw(st.sampled_from(kinds))
        if kind == "text":
            return self.obj([("type", self.s("text")), ("text", self.prose())])
        if kind == "image":
            return self.image(depth)
        if kind == "url":
            # a data URL in a Claude Code text block: cut as a payload, never an image
            return self.obj([("type", self.s("text")), ("text", self.data_url())])
        if kind == "document":
            return self.media_block("document", "application/pdf")
        if kind == "tool_use":
            # an image-shaped object under `input`: not in a content array, not walked
            return self.obj(
                [
                    ("type", self.s("tool_use")),
                    ("id", self.s("toolu_1")),
                    ("input", self.obj([("image", self.image())])),
                ]
            )
        if kind == "non-object":
            choice = self.draw(st.integers(0, 2))
            if choice == 0:
                return JLit(b"42")
            if choice == 1:
                return self.prose()
            return JArr([self.image()])  # an array directly in an array: not a block, not walked
        content: Any = self.prose() if self.rare(5) else self.blocks(depth + 1)
        if kind == "tool_result":
            return self.obj(
                [
                    ("type", self.s("tool_result")),
                    ("tool_use_id", self.s("toolu_1")),
                    ("content", content),
                    ("is_error", JLit(b"false")),
                ]
            )
        return self.obj([("type", self.s(self.draw(SHORT_ASCII))), ("content", content)])

    def entry(self) -> JObj:
        pairs: list[tuple[str | JStr, Any]] = [
            ("type", self.s(self.draw(st.sampled_from(ENTRY_TYPES))))
        ]
        if not self.rare(5):
            pairs.append(("uuid", self.s(self.draw(SHORT_ASCII))))
        if self.draw(st.booleans()):
            pairs.append(("timestamp", self.s("2025-01-02T03:04:05.678Z")))
        if self.draw(st.booleans()):
            pairs.append(("sessionId", self.s(self.draw(SHORT_ASCII))))
        if self.rare(10):
            pairs.append(("message", self.prose()))
        elif not self.rare(10):  # else: no message at all
            content = self.prose() if self.rare(10) else self.blocks(0)
            pairs.append(("message", self.obj([("role", self.s("user")), ("content", content)])))
        if self.payload_raws and self.draw(st.booleans()):
            copy = self.draw(st.sampled_from(self.payload_raws))
            file = self.obj(
                [
                    ("base64", JStr(copy)),
                    ("type", self.s("image/png")),
                    ("originalSize", JLit(b"123")),
                ]
            )
            pairs.append(("toolUseResult", self.obj([("type", self.s("image")), ("file", file)])))
        if self.rare(4):
            # attachment.prompt[] holds an image: outside message.content, cut, no ref
            pairs.append(("attachment", self.obj([("prompt", JArr([self.image()]))])))
        decoys = self.draw(
            st.sets(
                st.sampled_from(
                    ["key-data", "b64-key", "b64-top", "unicode", "data-top", "numbers", "spaces"]
                )
            )
        )
        for decoy in sorted(decoys):
            if decoy == "key-data":
                # a key ending in \"data whose value is long base64: cut, no ref
                pairs.append((JStr(b'x\\"data'), JStr(self.payload(allow_empty=False))))
            elif decoy == "b64-key":
                pairs.append((JStr(self.long_b64()), JLit(b"1")))
            elif decoy == "b64-top":
                pairs.append(("blob", JStr(self.long_b64())))
            elif decoy == "unicode":
                pairs.append(("\u65e5\u672c\u8a9e \U0001f600", self.prose()))
            elif decoy == "numbers":
                # a run longer than the limit without a quote, outside any string
                pairs.append(("sizes", JLit(b"[" + b",".join([b"0"] * self.limit) + b"]")))
            elif decoy == "spaces":
                pairs.append(("blank", JLit(b" " * (self.limit + 1) + b"1")))
            else:
                pairs.append(("data", JStr(self.long_b64())))
        return self.obj(pairs)


class Writer:
    """Serializes the AST: compact, spaced (`, ` and `: `) or messy whitespace."""

    def __init__(self, style: str, rng: random.Random) -> None:
        self.style = style
        self.rng = rng

    def ws(self) -> bytes:
        if self.style != "messy":
            return b""
        return self.rng.choice([b"", b"", b" ", b"  ", b"\t", b" \r\n ", b"\n"])

    def write(self, node: Any, out: list[bytes]) -> None:
        comma = b", " if self.style == "spaced" else b","
        colon = b": " if self.style == "spaced" else b":"
        if isinstance(node, JStr):
            out += [b'"', node.raw, b'"']
        elif isinstance(node, JLit):
            out.append(node.text)
        elif isinstance(node, JArr):
            out += [b"[", self.ws()]
            for i, item in enumerate(node.items):
                if i:
                    out += [self.ws(), comma, self.ws()]
                self.write(item, out)
            out += [self.ws(), b"]"]
        else:
            out += [b"{", self.ws()]
            for i, (key, value) in enumerate(node.pairs):
                if i:
                    out += [self.ws(), comma, self.ws()]
                self.write(key, out)
                out += [self.ws(), colon, self.ws()]
                self.write(value, out)
            out += [self.ws(), b"}"]


@st.composite
def transcript_lines(draw: Any, limit: int) -> bytes:
    gen = Gen(draw, limit)
    entry = gen.rollout_entry() if draw(st.integers(0, 3)) == 3 else gen.entry()
    style = draw(st.sampled_from(["compact", "spaced", "messy"]))
    writer = Writer(style, draw(st.randoms(use_true_random=False)))
    out: list[bytes] = [writer.ws()]
    writer.write(entry, out)
    out.append(writer.ws())
    return b"".join(out)


# =============================================================================
# The properties.
# =============================================================================


def _events(line: bytes, expected: Reference, limit: int) -> None:
    """Coverage statistics (pytest --hypothesis-show-statistics)."""
    event(f"refs: {min(len(expected.images), 3)}")
    event(f"cuts: {min(len(expected.cut_spans), 4)}")
    event(f"images: {min(expected.image_count, 4)}")
    if expected.failed:
        event("failed upload")
    if len(expected.images) < len(expected.cut_spans):
        event("cut without ref")
    for image in expected.images:
        raw = line[image.raw_start : image.raw_end]
        if b"\\" in raw:
            event("ref payload with escapes")
        if len(raw) - limit in (-1, 0, 1):
            event(f"ref payload raw length limit{len(raw) - limit:+d}")
        if image.decoded is None:
            event("ref payload undecodable")
    for start, end in expected.cut_spans:
        if end - start == limit:
            event("cut at exactly the limit")
    strings = ReferenceParser(line)
    strings.parse()
    for s in strings.value_strings:
        if s.end - s.start == limit - 1 and all(c in B64_ALPHABET for c in s):
            event("base64 value at limit-1 (kept)")
    if b'"uuid"' not in line:
        event("no uuid")
    if any(
        b"data:" in line[s:e] or b"\\u0064" in line[max(0, s - 30) : s]
        for s, e in expected.cut_spans
    ):
        event("data URL payload cut")
    if b'"payload"' in line:
        event("rollout line")
    if b", " in line:
        event("spaced")
    if any(i.index > 0 for i in expected.images):
        event("ref with index > 0")


def check_line(line: bytes, limit: int, max_line_size: int) -> None:
    expected = reference(line, limit)
    assert expected is not None, "the generator only writes JSON objects"
    assert expected.value == json.loads(line)  # the reference parser reads what json reads
    note(f"cut spans: {expected.cut_spans}; images: {expected.images}; failed: {expected.failed}")

    _events(line, expected, limit)

    result = strip_line(line, inline_limit=limit, max_line_size=max_line_size)
    assert result is not None
    with mmap.mmap(-1, len(line)) as mapped:  # the same scan over a memory map
        mapped.write(line)
        assert strip_line(mapped, inline_limit=limit, max_line_size=max_line_size) == result

    # The stripped text: exactly the payloads' raw text replaced by the marker.
    assert result.cut_count == len(expected.cut_spans)
    oversize = len(expected.stripped) > max_line_size
    assert result.oversize is oversize
    if oversize:
        # Still too large once stripped: the stub, unparsed (no refs), keeping the
        # top-level uuid found textually (always, when the window covers the line).
        stub = json.loads(result.json)
        assert stub["scrollbackOversize"] is True
        kb = max(1, round(len(line) / 1024))
        assert f"[message too large to display: ~{kb} KB]" in result.json.decode("utf-8")
        assert (result.images, result.failed_image_indexes) == ((), ())
        assert result.uuid in ("", expected.uuid) and stub.get("uuid", "") == result.uuid
        if len(line) <= TOP_LEVEL_WINDOW:
            assert result.uuid == expected.uuid
        assert result.image_count == 0
    else:
        assert result.json == expected.stripped
        assert json.loads(result.json) == expected.stripped_value
        assert result.uuid == expected.uuid

        # The refs: index, pin, declared media type, where the payload was.
        got = [
            (i.index, i.pin, i.declared_media_type, i.raw_start, i.raw_end) for i in result.images
        ]
        want = [(i.index, i.pin, i.media_type, i.raw_start, i.raw_end) for i in expected.images]
        assert got == want
        assert list(result.failed_image_indexes) == expected.failed
        assert result.image_count == expected.image_count

    # Extraction, for every ref this request minted: the exact bytes, same pin.
    for image in expected.images:
        if image.decoded is None:
            with pytest.raises(UndecodablePayloadError):
                extract_image(line, image.index)
            continue
        data, located = extract_image(line, image.index)
        assert data == image.decoded
        assert located.pin == image.pin
        assert located.index == image.index
        assert located.declared_media_type == image.media_type

    # Extraction for every index, against the reference at the extractor's own
    # limit (the smallest a request may use).
    at_min = reference(line, MIN_INLINE_LIMIT)
    assert at_min is not None
    by_index = {i.index: i for i in at_min.images}
    for index in range(at_min.image_count + 2):
        if index >= at_min.image_count or index in at_min.failed:
            with pytest.raises(ImageNotFoundError):
                extract_image(line, index)
        elif index not in by_index:
            with pytest.raises(ImageNotStrippedError):
                extract_image(line, index)
        elif by_index[index].decoded is None:
            with pytest.raises(UndecodablePayloadError):
                extract_image(line, index)
        else:
            data, located = extract_image(line, index)
            assert data == by_index[index].decoded
            assert located.pin == by_index[index].pin


@st.composite
def line_and_sizes(draw: Any, limit: int) -> tuple[bytes, int]:
    line = draw(transcript_lines(limit))
    if draw(st.integers(0, 9)) == 9:
        # around the stripped size: the oversize boundary
        stripped = reference(line, limit)
        assert stripped is not None
        return line, max(1, len(stripped.stripped) + draw(st.integers(-2, 1)))
    return line, DEFAULT_MAX_LINE_SIZE


@given(case=line_and_sizes(MIN_INLINE_LIMIT))
@settings(
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ]
)
def test_strip_line_matches_reference(case: tuple[bytes, int]) -> None:
    line, max_line_size = case
    check_line(line, MIN_INLINE_LIMIT, max_line_size)


@given(case=line_and_sizes(DEFAULT_INLINE_LIMIT))
@settings(
    max_examples=max(10, settings.default.max_examples // 40),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def test_strip_line_matches_reference_at_default_limit(case: tuple[bytes, int]) -> None:
    line, max_line_size = case
    check_line(line, DEFAULT_INLINE_LIMIT, max_line_size)


@given(case=line_and_sizes(MIN_INLINE_LIMIT), limit=st.sampled_from([1025, 2048, 4096]))
@settings(
    max_examples=max(10, settings.default.max_examples // 10),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def test_strip_line_matches_reference_at_other_limits(case: tuple[bytes, int], limit: int) -> None:
    """Lines built around 1024 stripped at other limits: refs are a subset, same pins."""
    line, max_line_size = case
    check_line(line, limit, max_line_size)


# =============================================================================
# The probe and the objects' byte spans (scrollback slim's block ranges).
# =============================================================================


def _unprobed(value: Any, payloads: dict[str, str]) -> Any:
    """A probed value with each placeholder replaced by the payload it stands for."""
    if isinstance(value, str):
        for placeholder, payload in payloads.items():
            if value.endswith(placeholder):  # a whole payload, or a data URL's
                return value[: len(value) - len(placeholder)] + payload
        return value
    if isinstance(value, list):
        return [_unprobed(item, payloads) for item in value]
    if isinstance(value, dict):
        return {key: _unprobed(item, payloads) for key, item in value.items()}
    return value


def check_probe(line: bytes, limit: int) -> None:
    """probe_line cuts what strip_line cuts; every object's span maps back to its original bytes."""
    probed = probe_line(line, limit)
    stripped = strip_line(line, limit, len(line) + 1)
    assert (probed is None) == (stripped is None)
    if probed is None:
        return
    assert probed.spans == find_payload_spans(line, limit)
    assert probed.pins == [pin_of(line[s:e]) for s, e in probed.spans]
    payloads = {
        placeholder: json.loads(b'"' + line[start:end] + b'"')
        for placeholder, (start, end) in zip(probed.placeholders, probed.spans, strict=True)
    }
    objects = list(iter_objects(probed.entry))
    spans = matching_spans(probed.probe, probed.entry, objects)
    for obj, span in zip(objects, spans, strict=True):
        if span is None:
            event("an object whose span cannot be told (duplicate keys)")
            continue
        start, end = probed.line_offset(span[0]), probed.line_offset(span[1])
        assert json.loads(line[start:end]) == _unprobed(obj, payloads)
    uuid_span = top_level_string_span(probed.probe, "uuid")
    if isinstance(probed.entry.get("uuid"), str) and uuid_span is not None:
        start, end = probed.line_offset(uuid_span[0]), probed.line_offset(uuid_span[1])
        assert json.loads(b'"' + line[start:end] + b'"') == probed.entry["uuid"]
    elif uuid_span is not None:
        event("a uuid member the parser did not keep")


@given(line=transcript_lines(MIN_INLINE_LIMIT))
@settings(
    max_examples=max(10, settings.default.max_examples // 2),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def test_probe_spans_map_back_to_the_line(line: bytes) -> None:
    check_probe(line, MIN_INLINE_LIMIT)


def test_probe_streamed_equals_probe() -> None:
    """The streamed probe of a line read in small chunks finds what the held one finds."""
    payload = base64.b64encode(bytes(range(256)) * 20).decode()
    escaped = payload.replace("/", "\\/")  # written as JavaScript may write it
    line = b"".join(
        (
            b'{"uuid":"u","message":{"content":[{"type":"image","source":{"data":"',
            payload.encode(),
            b'"}}]},"toolUseResult":{"file":{"base64":"',
            escaped.encode(),
            b'"}}}',
        )
    )
    held = probe_line(line)
    streamed = probe_line_streamed(
        lambda start, length: line[start : start + length], len(line), chunk_size=1000
    )
    assert held is not None and streamed is not None
    assert (held.spans, held.pins) == (streamed.spans, streamed.pins)
    assert len(held.spans) == 2
    assert probe_line_streamed(lambda s, n: line[s : s + n], len(line), max_kept=10) is None
