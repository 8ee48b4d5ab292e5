"""The reference codec (docs/contract.md §4): round trips and a rejection table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrollback.contract.refs import (
    MAX_IMAGE_INDEX,
    BlobRef,
    RefError,
    TranscriptImageRef,
    parse_blob_ref,
    parse_ref,
    parse_transcript_ref,
    validate_id,
    validate_index,
    validate_pin,
    validate_sha256,
)

HEX64 = "0123456789abcdef" * 4
ID64 = "A" * 62 + "_-"

ids = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
indexes = st.integers(min_value=0, max_value=MAX_IMAGE_INDEX)


# -- round trips ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "session_id", "entry_uuid", "index"),
    [
        ("s/e/0", "s", "e", 0),
        ("s/e/9999", "s", "e", 9999),
        ("s/e/10", "s", "e", 10),
        (f"{ID64}/{ID64}/7", ID64, ID64, 7),
        ("a_b-c/-_/1", "a_b-c", "-_", 1),
        ("_/-/42", "_", "-", 42),
        (
            "0d3a8e6f-290f-4105-a327-a2496e5e2a83/6f5e1c67-57a5-4f26-b12d-d022ee4e51b7/3",
            "0d3a8e6f-290f-4105-a327-a2496e5e2a83",
            "6f5e1c67-57a5-4f26-b12d-d022ee4e51b7",
            3,
        ),
    ],
)
def test_transcript_ref_round_trip(text: str, session_id: str, entry_uuid: str, index: int) -> None:
    for parse in (parse_ref, parse_transcript_ref):
        ref = parse(text)
        assert ref == TranscriptImageRef(session_id, entry_uuid, index)
        assert str(ref) == text


def test_blob_ref_round_trip() -> None:
    text = f"media:{HEX64}"
    for parse in (parse_ref, parse_blob_ref):
        ref = parse(text)
        assert ref == BlobRef(HEX64)
        assert str(ref) == text


@given(session_id=ids, entry_uuid=ids, index=indexes)
def test_transcript_ref_round_trip_property(session_id: str, entry_uuid: str, index: int) -> None:
    ref = TranscriptImageRef(session_id, entry_uuid, index)
    assert parse_ref(str(ref)) == ref
    assert parse_transcript_ref(str(ref)) == ref


@given(digest=st.from_regex(r"[0-9a-f]{64}", fullmatch=True))
def test_blob_ref_round_trip_property(digest: str) -> None:
    ref = BlobRef(digest)
    assert parse_ref(str(ref)) == ref
    assert parse_blob_ref(str(ref)) == ref


def test_validators_accept_edges() -> None:
    assert validate_id("a") == "a"
    assert validate_id(ID64) == ID64
    assert validate_id("_-") == "_-"
    assert validate_index(0) == 0
    assert validate_index(MAX_IMAGE_INDEX) == 9999
    assert validate_pin("0" * 32) == "0" * 32
    assert validate_sha256(HEX64) == HEX64


# -- rejections ----------------------------------------------------------------

REJECTED = {
    "empty": "",
    "dotdot session": "../e/0",
    "dotdot entry": "s/../0",
    "dotdot everywhere": "../../..",
    "dot session": "./e/0",
    "dot entry": "s/./0",
    "empty session": "/e/0",
    "empty entry": "s//0",
    "empty index": "s/e/",
    "all empty": "//",
    "one segment": "s",
    "two segments": "s/e",
    "four segments": "s/e/0/1",
    "trailing slash": "s/e/0/",
    "leading slash": "/s/e/0",
    "backslash separator": "s\\e\\0",
    "negative index": "s/e/-1",
    "index 10000": "s/e/10000",
    "huge index": "s/e/99999999999999999999",
    "leading zero 007": "s/e/007",
    "leading zero 00": "s/e/00",
    "leading zero 01": "s/e/01",
    "plus sign": "s/e/+1",
    "hex index": "s/e/0x1",
    "float index": "s/e/1.0",
    "exponent index": "s/e/1e3",
    "underscore in index": "s/e/1_0",
    "non-ASCII digit index": "s/e/\u0661",
    "fullwidth digit index": "s/e/\uff11",
    "space in session": "s s/e/0",
    "space in index": "s/e/1 2",
    "leading space": " s/e/0",
    "trailing space": "s/e/0 ",
    "trailing newline": "s/e/0\n",
    "leading newline": "\ns/e/0",
    "trailing tab": "s/e/0\t",
    "space before index": "s/e/ 0",
    "non-ASCII session": "s\u00e9/e/0",
    "non-ASCII entry": "s/\u65e5\u672c/0",
    "fullwidth letter": "\uff53/e/0",
    "NUL in session": "s\x00/e/0",
    "NUL in index": "s/e/0\x00",
    "dot in entry": "s/e.jsonl/0",
    "colon in session": "c:/e/0",
    "65-char session": "a" * 65 + "/e/0",
    "65-char entry": "s/" + "a" * 65 + "/0",
    "percent-encoded slash": "s%2Fe/0",
    "media alone": "media:",
    "media 63 hex": "media:" + HEX64[:63],
    "media 65 hex": "media:" + HEX64 + "0",
    "media upper-case hex": "media:" + HEX64.upper(),
    "media one upper-case char": "media:" + HEX64[:-1] + "F",
    "media non-hex": "media:" + "g" * 64,
    "media trailing space": "media:" + HEX64 + " ",
    "media leading space": " media:" + HEX64,
    "media trailing newline": "media:" + HEX64 + "\n",
    "media space after colon": "media: " + HEX64,
    "media upper-case prefix": "MEDIA:" + HEX64,
    "media no colon": "media" + HEX64,
    "media sha256 prefix": "media:sha256:" + HEX64,
    "media with path": "media:" + HEX64 + "/0",
    "media NUL": "media:" + HEX64[:32] + "\x00" + HEX64[33:],
    "media non-ASCII hex": "media:" + HEX64[:-1] + "\uff10",
}


@pytest.mark.parametrize("text", list(REJECTED.values()), ids=list(REJECTED))
def test_parse_ref_rejects(text: str) -> None:
    with pytest.raises(RefError):
        parse_ref(text)


@pytest.mark.parametrize(
    "text",
    [t for t in REJECTED.values() if not t.startswith("media:")],
    ids=[k for k, t in REJECTED.items() if not t.startswith("media:")],
)
def test_parse_transcript_ref_rejects(text: str) -> None:
    with pytest.raises(RefError):
        parse_transcript_ref(text)


@pytest.mark.parametrize(
    "text", ["", "s/e/0", "media", *(t for t in REJECTED.values() if "media" in t.lower())]
)
def test_parse_blob_ref_rejects(text: str) -> None:
    with pytest.raises(RefError):
        parse_blob_ref(text)


@pytest.mark.parametrize("value", [None, b"s/e/0", 0, ["s", "e", "0"]])
def test_parse_rejects_non_strings(value: object) -> None:
    for parse in (parse_ref, parse_transcript_ref, parse_blob_ref):
        with pytest.raises(RefError):
            parse(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    ["", ".", "..", "a" * 65, "a b", " a", "a ", "a\n", "a/b", "\u00e9", "a\x00", "a.b", None, 1],
)
def test_validate_id_rejects(value: object) -> None:
    with pytest.raises(RefError):
        validate_id(value)  # type: ignore[arg-type]
    with pytest.raises(RefError):
        TranscriptImageRef(value, "e", 0)  # type: ignore[arg-type]
    with pytest.raises(RefError):
        TranscriptImageRef("s", value, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 10000, 2**64, True, False, 1.0, "1", None])
def test_validate_index_rejects(value: object) -> None:
    with pytest.raises(RefError):
        validate_index(value)  # type: ignore[arg-type]
    with pytest.raises(RefError):
        TranscriptImageRef("s", "e", value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", ["", "0" * 31, "0" * 33, "A" * 32, "g" * 32, "0" * 31 + "\n", " " + "0" * 31, None]
)
def test_validate_pin_rejects(value: object) -> None:
    with pytest.raises(RefError):
        validate_pin(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", ["", HEX64[:63], HEX64 + "0", HEX64.upper(), HEX64[:-1] + "\n", None, b"0" * 64]
)
def test_validate_sha256_rejects(value: object) -> None:
    with pytest.raises(RefError):
        validate_sha256(value)  # type: ignore[arg-type]
    with pytest.raises(RefError):
        BlobRef(value)  # type: ignore[arg-type]


def test_errors_never_echo_the_input() -> None:
    secret = "/etc/passwd-and-more"
    for text in (secret, "media:" + secret, f"s/e/{secret}", f"{secret}/e/0"):
        with pytest.raises(RefError) as caught:
            parse_ref(text)
        assert secret not in str(caught.value)
        assert "passwd" not in str(caught.value)
