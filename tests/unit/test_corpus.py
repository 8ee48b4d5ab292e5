"""The real corpus (tests/corpus, copied from transcripts others wrote).

Every file, whatever its name or content, is split into lines and stripped:
nothing raises, and the counts agree with MANIFEST.tsv. Every image the
stripper cuts is extracted and compared with the base64 decoding of the
original payload, computed here from `json.loads` of the original line.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import xxhash

from scrollback.contract.extraction import extract_image
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER
from scrollback.contract.stripping import DEFAULT_INLINE_LIMIT, MIN_INLINE_LIMIT, strip_line

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
NOT_TRANSCRIPTS = {"MANIFEST.tsv", "README.md", "LICENSE"}
B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


@dataclass(frozen=True)
class Expected:
    bytes: int
    nonblank_lines: int
    unparseable_or_non_object: int
    entries_with_uuid: int
    images_in_message_content: int
    entries_with_images: int
    ends_with_newline: bool


def _manifest() -> dict[str, Expected]:
    with (CORPUS / "MANIFEST.tsv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return {
        row["file"]: Expected(
            bytes=int(row["bytes"]),
            nonblank_lines=int(row["nonblank_lines"]),
            unparseable_or_non_object=int(row["unparseable_or_non_object"]),
            entries_with_uuid=int(row["entries_with_uuid"]),
            images_in_message_content=int(row["images_in_message_content"]),
            entries_with_images=int(row["entries_with_images"]),
            ends_with_newline=row["ends_with_newline"] == "True",
        )
        for row in rows
    }


MANIFEST = _manifest()


def _corpus_files() -> list[str]:
    return sorted(
        path.relative_to(CORPUS).as_posix()
        for path in CORPUS.rglob("*")
        if path.is_file() and path.name not in NOT_TRANSCRIPTS
    )


def split_lines(data: bytes) -> Iterator[bytes]:
    """The lines of a file, without their newline; a last line without one counts."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the file ended with a newline (or was empty)
    yield from lines


def _image_blocks(entry: Any) -> list[Any]:
    """docs/contract.md §2, written again here: pre-order over message.content."""
    found: list[Any] = []

    def visit(blocks: list[Any]) -> None:
        for block in blocks:
            if isinstance(block, dict):
                if block.get("type") == "image":
                    found.append(block)
                if isinstance(block.get("content"), list):
                    visit(block["content"])

    message = entry.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), list):
        visit(message["content"])
    return found


def _replace_payloads(value: Any, limit: int) -> Any:
    """The original value with every long base64 string replaced by the marker.

    Valid for this corpus: its writers never escape base64 characters, so a
    string's raw length is its decoded length.
    """
    if isinstance(value, str):
        return STRIPPED_MEDIA_MARKER if len(value) >= limit and set(value) <= B64 else value
    if isinstance(value, dict):
        return {k: _replace_payloads(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_payloads(v, limit) for v in value]
    return value


def test_manifest_lists_every_corpus_file() -> None:
    assert sorted(MANIFEST) == _corpus_files()
    for folder in {Path(name).parts[0] for name in MANIFEST}:
        assert (CORPUS / folder / "LICENSE").is_file(), folder


def test_corpus_has_the_hard_inputs() -> None:
    """The shapes the tests rely on are still in the corpus."""
    assert any(e.bytes == 0 for e in MANIFEST.values())
    assert any(not e.ends_with_newline and e.bytes for e in MANIFEST.values())
    assert any(not name.endswith(".jsonl") for name in MANIFEST)
    assert sum(e.images_in_message_content for e in MANIFEST.values()) >= 6


@pytest.mark.parametrize("name", _corpus_files(), ids=_corpus_files())
def test_corpus_file(name: str) -> None:
    expected = MANIFEST[name]
    data = (CORPUS / name).read_bytes()
    assert len(data) == expected.bytes
    assert data.endswith(b"\n") == expected.ends_with_newline

    nonblank = not_objects = with_uuid = images = with_images = extracted = 0
    for line in split_lines(data):
        if not line.strip():
            assert strip_line(line) is None
            continue
        nonblank += 1
        at_default = strip_line(line)
        result = strip_line(line, inline_limit=MIN_INLINE_LIMIT)
        if result is None:
            assert at_default is None
            not_objects += 1
            continue
        assert at_default is not None
        original = json.loads(line)
        assert isinstance(original, dict)

        with_uuid += bool(result.uuid)
        assert result.uuid == (original["uuid"] if isinstance(original.get("uuid"), str) else "")
        images += result.image_count
        with_images += result.image_count > 0
        blocks = _image_blocks(original)
        assert result.image_count == at_default.image_count == len(blocks)

        for limit, stripped in ((MIN_INLINE_LIMIT, result), (DEFAULT_INLINE_LIMIT, at_default)):
            assert not stripped.oversize
            assert json.loads(stripped.json) == _replace_payloads(original, limit)
            want_refs = [
                i
                for i, block in enumerate(blocks)
                if isinstance(data_ := (block.get("source") or {}).get("data"), str)
                and len(data_) >= limit
                and set(data_) <= B64
            ]
            assert [image.index for image in stripped.images] == want_refs
            want_failed = [
                i for i, block in enumerate(blocks) if (block.get("source") or {}).get("data") == ""
            ]
            assert list(stripped.failed_image_indexes) == want_failed

        for image in result.images:
            payload = blocks[image.index]["source"]["data"]
            data_bytes, located = extract_image(line, image.index)
            assert data_bytes == base64.b64decode(payload, validate=True)
            assert located.pin == image.pin == xxhash.xxh3_128_hexdigest(payload.encode("ascii"))
            media_type = blocks[image.index]["source"].get("media_type")
            assert located.declared_media_type == media_type
            extracted += 1

    assert nonblank == expected.nonblank_lines
    assert not_objects == expected.unparseable_or_non_object
    assert with_uuid == expected.entries_with_uuid
    assert images == expected.images_in_message_content
    assert with_images == expected.entries_with_images
    if name.startswith("iansherr__claude-code-log/") and images:
        assert extracted == images  # the real screenshots are all cut and all extract
