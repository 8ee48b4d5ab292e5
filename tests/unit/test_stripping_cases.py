"""Explicit cases for the stripper and the extractor (docs/contract.md §2-3)."""

from __future__ import annotations

import base64
import json
import re

import pytest
import xxhash

from scrollback.contract.enumeration import iter_images
from scrollback.contract.extraction import (
    ImageNotFoundError,
    ImageNotStrippedError,
    UndecodablePayloadError,
    decode_image,
    extract_image,
    locate_image,
)
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER, STRIPPED_MEDIA_MARKER_BYTES
from scrollback.contract.stripping import (
    DEFAULT_INLINE_LIMIT,
    MIN_INLINE_LIMIT,
    find_payload_spans,
    strip_line,
)

LIMIT = MIN_INLINE_LIMIT
MARKER = STRIPPED_MEDIA_MARKER_BYTES
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8  # 2056 bytes
PNG_B64 = base64.b64encode(PNG)  # 2744 characters, valid base64, contains "/" and "+"
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(255, -1, -1)) * 6
JPEG_B64 = base64.b64encode(JPEG)


def image_block(data: bytes, media_type: str = "image/png") -> bytes:
    return (
        b'{"type":"image","source":{"type":"base64","media_type":"'
        + media_type.encode()
        + b'","data":"'
        + data
        + b'"}}'
    )


def entry(*blocks: bytes, uuid: str | None = "u-1", extra: bytes = b"") -> bytes:
    head = b'{"type":"user",' + (f'"uuid":"{uuid}",'.encode() if uuid is not None else b"")
    return head + b'"message":{"role":"user","content":[' + b",".join(blocks) + b"]}" + extra + b"}"


def cut(line: bytes, *payloads: bytes) -> bytes:
    """The line with each payload's (unique) raw text replaced by the marker."""
    for payload in payloads:
        assert line.count(payload) >= 1
        line = line.replace(payload, MARKER)
    return line


# -- lines that are not JSON objects ------------------------------------------

NOT_OBJECTS = {
    "empty": b"",
    "blank": b"   ",
    "whitespace only": b" \t\r",
    "malformed": b'{"type":"user",',
    "missing value": b'{"type":}',
    "single quotes": b"{'type':'user'}",
    "trailing comma": b'{"a":1,}',
    "two objects": b'{"a":1}{"b":2}',
    "object then garbage": b'{"a":1} x',
    "array": b'[{"type":"user"}]',
    "empty array": b"[]",
    "bare string": b'"hello"',
    "bare number": b"42",
    "bare true": b"true",
    "bare null": b"null",
    "NaN": b'{"a":NaN}',
    "Infinity": b'{"a":Infinity}',
    "-Infinity": b'{"a":-Infinity}',
    "invalid UTF-8 in a string": b'{"text":"\xff\xfe"}',
    "invalid UTF-8 outside": b'\xff{"a":1}',
    "truncated UTF-8": b'{"text":"\xe6\x97"}',
    "overlong UTF-8": b'{"text":"\xc0\xaf"}',
    "UTF-8-encoded surrogate (CESU-8)": b'{"text":"\xed\xa0\x80"}',
    "UTF-16-LE": '{"type":"user"}'.encode("utf-16-le"),
    "UTF-16 with BOM": '{"type":"user"}'.encode("utf-16"),
    "UTF-32": '{"type":"user"}'.encode("utf-32"),
    "UTF-8 BOM": b'\xef\xbb\xbf{"type":"user"}',
    "raw control char in string": b'{"text":"a\x01b"}',
    "raw newline in string": b'{"text":"a\nb"}',
    "bad escape": b'{"text":"\\x41"}',
    "short unicode escape": b'{"text":"\\u12"}',
    "unterminated string": b'{"text":"abc',
    "NUL": b"\x00",
    "pretty-printed first line": b"{",
    "closing brace": b"}",
    "debug log": b"2025-01-01 12:00:00 [DEBUG] starting session",
    "deep nesting array": b"[" * 100000 + b"]" * 100000,
    "deep nesting unterminated": b'{"a":' * 100000,
}


@pytest.mark.parametrize("line", list(NOT_OBJECTS.values()), ids=list(NOT_OBJECTS))
def test_not_an_object_is_none(line: bytes) -> None:
    for limit in (LIMIT, DEFAULT_INLINE_LIMIT):
        assert strip_line(line, inline_limit=limit) is None
    with pytest.raises(ImageNotFoundError):
        extract_image(line, 0)


def test_not_an_object_with_long_base64_is_none() -> None:
    for line in (
        b'["' + PNG_B64 + b'"]',
        b'"' + PNG_B64 + b'"',
        b'{"a":"' + PNG_B64 + b'"',  # truncated after the payload
        b'{"a":"' + PNG_B64 + b'",}',
        b'{"a" "' + PNG_B64 + b'"}',  # missing colon
    ):
        assert strip_line(line, inline_limit=LIMIT) is None


def test_deep_nesting_object_is_served() -> None:
    """Deep but valid JSON is an object: served."""
    line = b'{"a":' + b"[" * 900 + b"]" * 900 + b"}"
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == line


def test_hostile_nesting_never_raises() -> None:
    """Nesting past the parsers' depth limits is skipped like invalid JSON, never a crash."""
    line = b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}"
    assert strip_line(line, inline_limit=LIMIT) is None


def test_every_prefix_of_an_image_line_is_skipped() -> None:
    """A half-written line (no prefix of an object is an object) is never served."""
    line = entry(image_block(PNG_B64), b'{"type":"text","text":"caf\\u00e9 \xe6\x97\xa5"}')
    assert strip_line(line, inline_limit=LIMIT) is not None
    cuts = sorted({*range(0, len(line), 13), *range(len(line) - 40, len(line))})
    for end in cuts:
        assert strip_line(line[:end], inline_limit=LIMIT) is None, end
        with pytest.raises(ImageNotFoundError):
            extract_image(line[:end], 0)


def test_lone_surrogate_escape_is_valid_json_and_served() -> None:
    """JavaScript writes lone surrogates as `\\ud800`: valid JSON, served as is."""
    line = entry(
        b'{"type":"text","text":"broken emoji \\ud83d then \\udc00 and \\ud800"}',
        image_block(PNG_B64),
        uuid="u-surrogate",
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.uuid == "u-surrogate"
    assert result.json == cut(line, PNG_B64)
    assert json.loads(result.json)["message"]["content"][0]["text"].endswith("\ud800")
    assert [image.index for image in result.images] == [0]
    data, located = extract_image(line, 0)
    assert data == PNG
    assert located.pin == xxhash.xxh3_128_hexdigest(PNG_B64)


def test_lone_surrogate_in_top_level_fields() -> None:
    line = b'{"type":"\\ud800","uuid":"\\udfff","timestamp":"\\ud800x"}'
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == line
    assert (result.type, result.uuid, result.timestamp) == ("\ud800", "\udfff", "\ud800x")
    # and when it is oversize, the stub is still valid JSON
    stub = strip_line(line, inline_limit=LIMIT, max_line_size=10)
    assert stub is not None and stub.oversize
    json.loads(stub.json)


def test_duplicate_keys_last_wins() -> None:
    line = (
        b'{"type":"user","message":{"content":[{"type":"image","source":{"data":"'
        + PNG_B64
        + b'","data":""}}]}}'
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.cut_count == 1
    assert result.images == ()
    assert result.failed_image_indexes == (0,)


# -- the oversize stub ---------------------------------------------------------


def test_oversize_line_becomes_a_stub() -> None:
    text = "lorem ipsum, " * 400
    line = (
        b'{"type":"assistant","uuid":"u-big","timestamp":"2025-01-01T00:00:00Z",'
        b'"message":{"content":[{"type":"text","text":"' + text.encode() + b'"}]}}'
    )
    result = strip_line(line, inline_limit=LIMIT, max_line_size=1000)
    assert result is not None
    assert result.oversize is True
    stub = json.loads(result.json)
    assert isinstance(stub, dict)
    kb = round(len(line) / 1024)
    assert f"[message too large to display: ~{kb} KB]" in result.json.decode()
    assert re.search(rb"\[message too large to display: ~\d+ KB\]", result.json)
    assert len(result.json) < 1000
    assert result.images == ()


def test_oversize_is_judged_after_stripping() -> None:
    line = entry(image_block(PNG_B64), uuid="u-img")
    stripped = cut(line, PNG_B64)
    at_size = strip_line(line, inline_limit=LIMIT, max_line_size=len(stripped))
    assert at_size is not None and not at_size.oversize
    assert at_size.json == stripped
    over = strip_line(line, inline_limit=LIMIT, max_line_size=len(stripped) - 1)
    assert over is not None and over.oversize
    assert b"[message too large to display: ~3 KB]" in over.json
    json.loads(over.json)
    # with the payload kept (limit above its size) the same line is oversize
    kept = strip_line(line, inline_limit=len(PNG_B64) + 1, max_line_size=len(line) - 1)
    assert kept is not None and kept.oversize
    whole = strip_line(line, inline_limit=len(PNG_B64) + 1, max_line_size=len(line))
    assert whole is not None and not whole.oversize and whole.json == line


def test_oversize_tiny_line_says_at_least_1_kb() -> None:
    result = strip_line(b'{"type":"user","a":"bcdef"}', inline_limit=LIMIT, max_line_size=5)
    assert result is not None and result.oversize
    assert b"~1 KB]" in result.json


# -- where the marker goes -----------------------------------------------------


def test_marker_stands_exactly_where_payloads_were() -> None:
    line = entry(
        image_block(PNG_B64),
        b'{"type":"tool_result","tool_use_id":"t1","content":['
        + image_block(JPEG_B64, "image/jpeg")
        + b"]}",
        extra=b',"toolUseResult":{"file":{"base64":"' + PNG_B64 + b'","type":"image/png"}}',
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, PNG_B64, JPEG_B64)
    assert result.json.count(MARKER) == 3
    assert result.cut_count == 3
    assert STRIPPED_MEDIA_MARKER not in line.decode()
    parsed = json.loads(result.json)
    assert parsed["toolUseResult"]["file"]["base64"] == STRIPPED_MEDIA_MARKER
    content = parsed["message"]["content"]
    assert content[0]["source"]["data"] == STRIPPED_MEDIA_MARKER
    assert content[1]["content"][0]["source"]["data"] == STRIPPED_MEDIA_MARKER
    assert [(i.index, i.declared_media_type) for i in result.images] == [
        (0, "image/png"),
        (1, "image/jpeg"),
    ]
    assert [i.pin for i in result.images] == [
        xxhash.xxh3_128_hexdigest(PNG_B64),
        xxhash.xxh3_128_hexdigest(JPEG_B64),
    ]
    for image, expected in zip(result.images, (PNG, JPEG), strict=True):
        assert line[image.raw_start : image.raw_end] in (PNG_B64, JPEG_B64)
        assert extract_image(line, image.index)[0] == expected


def test_spaced_json_and_any_key_order() -> None:
    line = (
        b'{ "message" : { "content" : [ { "source" : { "data" : "' + PNG_B64 + b'" ,'
        b' "media_type" : "image/png" , "type" : "base64" } , "type" : "image" } ] } ,'
        b' "uuid" : "u-spaced" , "type" : "user" }'
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, PNG_B64)
    assert result.uuid == "u-spaced"
    assert [(i.index, i.declared_media_type) for i in result.images] == [(0, "image/png")]
    assert extract_image(line, 0)[0] == PNG


def test_escaped_payload_is_cut_with_raw_pin_and_exact_bytes() -> None:
    escaped = (
        PNG_B64.replace(b"/", b"\\/")
        .replace(b"A", b"\\u0041", 3)
        .replace(b"+", b"\\u002B", 2)
        .replace(b"J", b"\\u004A", 1)
        .replace(b"j", b"\\u006a", 1)
    )
    assert escaped != PNG_B64 and b"\\u0041" in escaped and b"\\/" in escaped
    line = entry(image_block(escaped))
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, escaped)
    (image,) = result.images
    assert image.pin == xxhash.xxh3_128_hexdigest(escaped)  # the raw text, escapes as written
    data, located = extract_image(line, 0)
    assert data == PNG
    assert located.pin == image.pin


def test_escaped_type_and_keys_count() -> None:
    """`"typ\\u0065":"im\\u0061ge"` is an image block too: escapes are read."""
    block = b'{"typ\\u0065":"im\\u0061ge","source":{"d\\u0061ta":"' + PNG_B64 + b'"}}'
    line = entry(block)
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.image_count == 1
    assert [i.index for i in result.images] == [0]
    assert extract_image(line, 0)[0] == PNG


def test_prose_mentioning_data_is_not_cut() -> None:
    mention = b'see \\"data\\":\\"' + PNG_B64 + b'\\" in the log'
    line = entry(
        b'{"type":"text","text":"' + mention + b'"}',
        b'{"type":"text","text":"' + PNG_B64 + b' trailing words"}',
        b'{"type":"text","text":"' + PNG_B64 + b'\\n"}',
        b'{"type":"text","text":"' + PNG_B64 + b"\xc3\xa9" + b'"}',
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.cut_count == 0
    assert result.json == line
    assert find_payload_spans(line, LIMIT) == []


def test_key_ending_in_escaped_data() -> None:
    """The key `x\\"data` ends in `"data` as text; its value is just long base64."""
    line = (
        b'{"type":"user","uuid":"u","x\\"data":"' + PNG_B64 + b'",'
        b'"message":{"content":[' + image_block(JPEG_B64) + b"]}}"
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, PNG_B64, JPEG_B64)
    assert json.loads(result.json)['x"data'] == STRIPPED_MEDIA_MARKER
    assert [(i.index, i.pin) for i in result.images] == [(0, xxhash.xxh3_128_hexdigest(JPEG_B64))]


def test_escaped_backslash_before_closing_quote() -> None:
    r"""`"a\\"` closes after the even backslash run; the next string is a payload."""
    line = entry(b'{"type":"text","text":"C:\\\\dir\\\\"}', image_block(PNG_B64))
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, PNG_B64)
    assert [i.index for i in result.images] == [0]


@pytest.mark.parametrize(
    "run",
    [b"[" + b",".join([b"7"] * LIMIT) + b"]", b" " * (LIMIT + 1) + b"1"],
    ids=["numbers", "spaces"],
)
def test_long_run_outside_strings_keeps_the_tokenizer_in_step(run: bytes) -> None:
    """A run of the inline limit without a quote, after a key: the quote before it
    closes a string, and the strings after it (one ending in an escaped
    backslash, one holding an escaped quote) are still read as what they are."""
    line = (
        b'{"sizes":' + run + b',"s":"abc","t":"x\\\\",'
        b'"message":{"role":"user","content":[' + image_block(PNG_B64) + b"]},"
        b'"e":"a\\"b","blob":"' + JPEG_B64 + b'"}'
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, PNG_B64, JPEG_B64)
    assert [(i.index, i.pin) for i in result.images] == [(0, xxhash.xxh3_128_hexdigest(PNG_B64))]


def test_long_base64_key_is_not_cut() -> None:
    line = b'{"type":"user","' + PNG_B64 + b'":1,"k":{"' + JPEG_B64 + b'" :"x"}}'
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.cut_count == 0
    assert result.json == line


def test_long_base64_outside_message_content_is_cut_without_ref() -> None:
    line = (
        b'{"type":"queue-operation","attachment":{"prompt":[' + image_block(PNG_B64) + b"]},"
        b'"message":{"content":"text only"},"toolUseResult":{"tool_input":{"image":'
        + image_block(JPEG_B64)
        + b"}}}"
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, PNG_B64, JPEG_B64)
    assert result.cut_count == 2
    assert result.images == ()
    assert result.image_count == 0
    assert result.uuid == ""


def test_image_without_uuid_still_gets_an_index() -> None:
    line = entry(image_block(PNG_B64), uuid=None)
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.uuid == ""
    assert [i.index for i in result.images] == [0]


def test_document_is_cut_without_ref_and_not_counted() -> None:
    pdf = base64.b64encode(b"%PDF-1.7\n" + bytes(2000))
    document = (
        b'{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"'
        + pdf
        + b'"}}'
    )
    line = entry(document, image_block(PNG_B64))
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == cut(line, pdf, PNG_B64)
    assert result.image_count == 1
    assert [i.index for i in result.images] == [0]
    assert extract_image(line, 0)[0] == PNG


def test_enumeration_order_with_nested_tool_results() -> None:
    payloads = [base64.b64encode(bytes([n]) * 1500) for n in range(5)]
    nested = (
        b'{"type":"tool_result","content":['
        + image_block(payloads[1])
        + b',{"type":"tool_result","content":['
        + image_block(payloads[2])
        + b"]},"
        + image_block(payloads[3])
        + b"]}"
    )
    line = entry(
        image_block(payloads[0]),
        nested,
        b'{"type":"tool_use","input":{"image":' + image_block(b"") + b"}}",  # not walked
        b"[" + image_block(b"") + b"]",  # an array in an array: not a block
        image_block(payloads[4]),
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.image_count == 5
    assert result.failed_image_indexes == ()
    assert [i.index for i in result.images] == [0, 1, 2, 3, 4]
    for n in range(5):
        data, located = extract_image(line, n)
        assert data == bytes([n]) * 1500
        assert located.pin == xxhash.xxh3_128_hexdigest(payloads[n])


def test_enumeration_is_pre_order() -> None:
    """A block (even an image) with a content array counts before its content."""
    small = base64.b64encode(b"small")
    outer = (
        b'{"type":"image","source":{"data":"'
        + small
        + b'"},"content":['
        + image_block(PNG_B64)
        + b"]}"
    )
    line = entry(outer, image_block(JPEG_B64))
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.image_count == 3
    assert [i.index for i in result.images] == [1, 2]
    assert extract_image(line, 1)[0] == PNG
    assert extract_image(line, 2)[0] == JPEG
    with pytest.raises(ImageNotStrippedError):
        extract_image(line, 0)


def test_failed_upload_and_cut_image_in_one_entry() -> None:
    line = entry(image_block(b""), image_block(PNG_B64), b'{"type":"image"}')
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.failed_image_indexes == (0,)
    assert [i.index for i in result.images] == [1]
    assert result.image_count == 3
    assert result.json == cut(line, PNG_B64)


@pytest.mark.parametrize(
    ("length", "is_cut"), [(LIMIT - 1, False), (LIMIT, True), (LIMIT + 1, True)]
)
def test_inline_limit_boundary(length: int, is_cut: bool) -> None:
    payload = (PNG_B64 * 2)[:length]
    line = entry(image_block(payload))
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.cut_count == int(is_cut)
    assert result.json == (cut(line, payload) if is_cut else line)
    assert [i.index for i in result.images] == ([0] if is_cut else [])


def test_default_limit_keeps_small_images_inline() -> None:
    line = entry(image_block(PNG_B64))
    result = strip_line(line)  # the default 32 KiB
    assert result is not None
    assert result.json == line
    assert result.images == ()
    # the media service still finds it (it scans at the smallest limit)
    assert extract_image(line, 0)[0] == PNG


def test_bad_padding_with_base64_alphabet_is_still_cut() -> None:
    for payload in (PNG_B64[:-1], PNG_B64 + b"A", PNG_B64.rstrip(b"=") + b"=" * 3, b"A" * 1025):
        line = entry(image_block(payload))
        result = strip_line(line, inline_limit=LIMIT)
        assert result is not None
        assert result.json == cut(line, payload), payload[-8:]
        assert [i.index for i in result.images] == [0]
        located = locate_image(line, 0)
        assert located.pin == xxhash.xxh3_128_hexdigest(payload)
        with pytest.raises(UndecodablePayloadError):
            decode_image(line, located)
        with pytest.raises(UndecodablePayloadError):
            extract_image(line, 0)


# -- extract_image errors ------------------------------------------------------


def test_extract_index_past_images_is_not_found() -> None:
    line = entry(image_block(PNG_B64))
    assert extract_image(line, 0)[0] == PNG
    for index in (1, 2, 9999):
        with pytest.raises(ImageNotFoundError):
            extract_image(line, index)


def test_extract_from_line_without_images_is_not_found() -> None:
    with pytest.raises(ImageNotFoundError):
        extract_image(b'{"type":"summary","leafUuid":"x"}', 0)


def test_extract_failed_upload_is_not_found() -> None:
    line = entry(image_block(b""), image_block(PNG_B64))
    with pytest.raises(ImageNotFoundError):
        extract_image(line, 0)
    assert extract_image(line, 1)[0] == PNG


def test_extract_small_inline_image_is_not_stripped() -> None:
    small = base64.b64encode(b"tiny png")
    line = entry(image_block(small), image_block(PNG_B64), b'{"type":"image"}')
    with pytest.raises(ImageNotStrippedError):
        extract_image(line, 0)
    with pytest.raises(ImageNotStrippedError):
        extract_image(line, 2)  # no source at all
    assert extract_image(line, 1)[0] == PNG


def test_extract_marker_is_not_stripped() -> None:
    """A line that already holds the marker (e.g. a served line written back)."""
    line = entry(image_block(MARKER))
    with pytest.raises(ImageNotStrippedError):
        extract_image(line, 0)


def test_extract_undecodable_payload() -> None:
    line = entry(image_block(b"Q" * 1025))
    with pytest.raises(UndecodablePayloadError):
        extract_image(line, 0)


def test_errors_carry_no_payload() -> None:
    line = entry(image_block(b"Q" * 1025))
    with pytest.raises(UndecodablePayloadError) as caught:
        extract_image(line, 0)
    assert "QQQQ" not in str(caught.value)


@pytest.mark.parametrize("slices", [1, 2])
@pytest.mark.parametrize("delta", [-8, -4, 0, 4, 8])
def test_payload_ending_at_and_around_validation_slice_boundaries(slices: int, delta: int) -> None:
    # The fast path validates long strings in slices and finds the closing
    # quote in the first slice that fails: the quote may sit anywhere in it.
    from scrollback.contract.payload_scan import _VALIDATE_SLICE

    payload = (b"QUJD" * (_VALIDATE_SLICE * slices // 4 + 8))[: _VALIDATE_SLICE * slices + delta]
    line = entry(image_block(payload))
    result = strip_line(line)
    assert result is not None
    assert [(i.index, i.raw_length) for i in result.images] == [(0, len(payload))]
    assert result.images[0].pin == xxhash.xxh3_128_hexdigest(payload)
    assert STRIPPED_MEDIA_MARKER_BYTES in result.json and payload not in result.json


@pytest.mark.parametrize("bad", [b" ", b"\\n", b"-", b'\\"'])
def test_long_string_with_one_bad_character_after_a_slice_is_not_cut(bad: bytes) -> None:
    from scrollback.contract.payload_scan import _VALIDATE_SLICE

    text = b"QUJD" * (_VALIDATE_SLICE // 4) + bad + b"QUJD" * 64
    result = strip_line(entry(image_block(text)))
    assert result is not None
    assert result.images == () and result.cut_count == 0
    assert json.loads(result.json) == json.loads(entry(image_block(text)))


def test_first_not_base64_knows_the_alphabet_exactly() -> None:
    # Every byte value, alone and inside a run longer than one SIMD register.
    from scrollback.contract.payload_scan import first_not_base64

    alphabet = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    for value in range(256):
        data = b"QUJD" * 40 + bytes([value]) + b"QUJD" * 40
        expected = -1 if value in alphabet else 160
        assert first_not_base64(data) == expected, value
        assert first_not_base64(memoryview(data), 160, 161) == expected
        assert first_not_base64(data, 161) == -1


# -- data URLs (docs/contract.md §3) ------------------------------------------

URL = b"data:image/png;base64," + PNG_B64


def test_data_url_in_a_rollout_line_is_cut_after_its_comma_and_gets_a_ref() -> None:
    line = (
        b'{"timestamp":"t","type":"response_item","payload":{"type":"message","role":"user",'
        b'"content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"'
        + URL
        + b'"}]}}'
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.json == line.replace(PNG_B64, STRIPPED_MEDIA_MARKER_BYTES)
    (image,) = result.images
    assert (image.index, image.declared_media_type) == (0, "image/png")
    assert line[image.raw_start : image.raw_end] == PNG_B64
    assert image.pin == xxhash.xxh3_128_hexdigest(PNG_B64)
    data, located = extract_image(line, 0)
    assert data == PNG and located.pin == image.pin


def test_data_urls_of_an_event_msg_images_array_count_in_order() -> None:
    jpeg = b"data:image/jpeg;base64," + PNG_B64[::-1].replace(b"=", b"A")
    line = (
        b'{"type":"event_msg","payload":{"type":"user_message","message":"two",'
        b'"images":["' + URL + b'","data:image/gif;base64,","' + jpeg + b'"]}}'
    )
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert [(i.index, i.declared_media_type) for i in result.images] == [
        (0, "image/png"),
        (2, "image/jpeg"),
    ]
    assert result.failed_image_indexes == (1,)  # an empty payload: a failed upload
    assert result.image_count == 3


def test_data_url_in_a_claude_code_line_is_cut_without_a_ref() -> None:
    text = b'{"type":"text","text":"' + URL + b'"}'
    line = entry(b'{"type":"tool_result","tool_use_id":"t","content":[' + text + b"]}")
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None
    assert result.cut_count == 1 and result.images == ()
    assert b"data:image/png;base64," + STRIPPED_MEDIA_MARKER_BYTES in result.json


@pytest.mark.parametrize(
    "prefix",
    [
        b"data:image\\/png;base64,",  # an escaped slash: still a data URL
        b"\\u0064ata:image/png;base64,",
    ],
)
def test_escaped_data_url_prefixes_are_read(prefix: bytes) -> None:
    line = b'{"type":"x","payload":{"image_url":"' + prefix + PNG_B64 + b'"}}'
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None and [i.declared_media_type for i in result.images] == ["image/png"]
    assert extract_image(line, 0)[0] == PNG


@pytest.mark.parametrize(
    "prefix",
    [b"data:image/png,", b"data:image/png;base64;", b"Data:image/png;base64,", b"data:;base64,"],
)
def test_near_misses_of_the_prefix_are_prose(prefix: bytes) -> None:
    line = b'{"type":"x","payload":{"image_url":"' + prefix + PNG_B64 + b'"}}'
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None and result.cut_count == 0 and result.image_count == 0


def test_a_data_url_whose_payload_is_under_the_limit_is_kept() -> None:
    short = PNG_B64[: LIMIT - 4]
    line = b'{"type":"x","payload":{"image_url":"data:image/png;base64,' + short + b'"}}'
    result = strip_line(line, inline_limit=LIMIT)
    assert result is not None and result.cut_count == 0 and result.image_count == 1


@pytest.mark.parametrize(
    "entry",
    [
        {"message": {"content": [{"type": "text", "text": "hi"}]}},
        {"message": {"content": "plain text"}},
        {"message": "not an object"},
        {"message": {"content": [{"type": "image", "source": {"data": "", "media_type": "x"}}]}},
        {"message": {"content": [{"type": "image", "source": {"data": "QUJD"}}, "text"]}},
        {
            "message": {
                "content": [
                    {"type": "text", "text": "before"},
                    {"type": "tool_result", "content": [{"type": "image", "source": {}}]},
                ]
            }
        },
        {"message": {"content": [{"type": "tool_result", "content": "no blocks"}]}},
        {"payload": {"content": [{"image_url": "data:image/png;base64,QUJD"}]}},
        {"payload": {"text": "data:text/plain;base64,QUJD"}},
        {"type": "user"},
    ],
)
def test_short_lines_count_and_fail_their_images_as_the_walk_does(entry: dict) -> None:
    # Lines too short to hold a payload, with or without images of their own:
    # their counts and failed indexes are the enumeration walk's.
    line = json.dumps(entry, separators=(",", ":")).encode()
    images = list(iter_images(entry))
    result = strip_line(line, DEFAULT_INLINE_LIMIT)
    assert result is not None
    assert result.image_count == len(images)
    assert result.failed_image_indexes == tuple(
        index for index, (data, _) in enumerate(images) if data == ""
    )
    assert result.json == line
    assert result.images == ()
