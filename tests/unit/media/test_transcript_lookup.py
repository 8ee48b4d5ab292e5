"""The transcript line lookup: hinted line reads, the uuid search, the metadata cache."""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from media_service import payload_facts, thumbnails, uuid_scan
from media_service.errors import MediaNotFoundError
from media_service.transcript_media import TranscriptMedia
from media_service.uuid_scan import iter_candidate_lines, uuid_key_pattern
from scrollback import imaging
from scrollback.contract.refs import TranscriptImageRef
from scrollback.contract.stripping import strip_line
from scrollback.directory import DirectoryRoot
from scrollback.linefile import LocalSource
from scrollback.principals import Principal


def _fd(tmp_path: Path, data: bytes) -> LocalSource:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    return LocalSource(os.open(path, os.O_RDONLY))


SPACES = st.text(alphabet=" \t\r", max_size=20)  # no raw newline inside a line


@st.composite
def uuid_lines(draw: st.DrawFn) -> bytes:
    """Lines holding the uuid in many shapes: keys, values, text, nesting, odd spacing."""
    lines: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        pad = "p" * draw(st.integers(0, 50))
        shape = draw(st.sampled_from(["top", "parent", "nested", "text", "other", "tail"]))
        before, after = draw(SPACES), draw(SPACES)
        lead = draw(st.sampled_from(["{", "{ ", '{"x":1,', '{"x":1 , ', '{"x":[1]']))
        if shape == "top":
            body = f'{lead}"uuid"{before}:{after}"u-t","pad":"{pad}"}}'
        elif shape == "tail":
            body = f'{{"pad":"{pad}"{before},{after}"uuid":"u-t"}}'
        elif shape == "parent":
            body = f'{{"parentUuid":"u-t","uuid":"u-o","pad":"{pad}"}}'
        elif shape == "nested":
            body = f'{{"uuid":"u-o","r":{{"uuid"{before}:{after}"u-t"}},"pad":"{pad}"}}'
        elif shape == "text":
            body = f'{{"uuid":"u-o","t":"\\"uuid\\":\\"u-t\\" uuid: \\"u-t\\"{pad}"}}'
        else:
            body = f'{{"uuid":"u-t-longer","pad":"{pad}"}}'
        lines.append(body.encode())
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


def reference_candidates(data: bytes, entry_uuid: str) -> list[tuple[int, bytes]]:
    """Lines where the old whole-file regex finds the key, preceded by `{` or `,`."""
    pattern = uuid_key_pattern(entry_uuid)
    found: list[tuple[int, bytes]] = []
    start = 0
    for line in data.split(b"\n"):
        for match in pattern.finditer(line):
            before = line[: match.start()].rstrip(b" \t\r\n")
            if before and before[-1:] in (b"{", b","):
                found.append((start, line))
                break
        start += len(line) + 1
    return found


@settings(max_examples=300, deadline=None)
@given(uuid_lines(), st.integers(1, 80))
def test_search_matches_the_regex_reference(data: bytes, chunk: int) -> None:
    original = uuid_scan.SCAN_CHUNK
    uuid_scan.SCAN_CHUNK = chunk
    fd, name = tempfile.mkstemp()
    try:
        os.write(fd, data)
        found = [(c.start, c.line) for c in iter_candidate_lines(LocalSource(fd), "u-t", 10_000)]
    finally:
        uuid_scan.SCAN_CHUNK = original
        os.close(fd)
        os.unlink(name)
    expected = reference_candidates(data, "u-t")
    # a trailing empty "line" after the last newline never matches
    assert found == expected
    for _start, line in found:
        parsed: Any = json.loads(line)
        if parsed.get("uuid") != "u-t":
            assert "u-t" in json.dumps(parsed)


def _image_line(uuid: str, payload: bytes) -> bytes:
    block = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(payload).decode(),
        },
    }
    value = {"type": "user", "uuid": uuid, "message": {"role": "user", "content": [block]}}
    return json.dumps(value, separators=(",", ":")).encode()


def test_metadata_is_cached_but_bytes_are_decoded_each_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 100
    line = _image_line("u-1", payload)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "s.jsonl").write_bytes(b'{"uuid":"u-0"}\n' + line + b"\n")
    stripped = strip_line(line)
    assert stripped is not None
    pin = stripped.images[0].pin
    media = TranscriptMedia(DirectoryRoot(tmp_path), max_line_size=1 << 20)
    ref = TranscriptImageRef("s", "u-1", 0)

    real = payload_facts.hashlib
    passes: list[int] = []
    real_decoded = payload_facts.iter_decoded

    def iter_decoded(*args: Any, **kwargs: Any) -> Any:
        passes.append(1)
        return real_decoded(*args, **kwargs)

    monkeypatch.setattr(payload_facts, "iter_decoded", iter_decoded)
    first, data = media.read(None, ref, pin)
    assert data == payload and first.sha256 == real.sha256(payload).hexdigest()
    second, again = media.read(None, ref, pin, 15)
    assert again == payload and second == first
    assert media.stat(None, ref, pin) == first
    assert passes == [1]  # one metadata pass; reads decode slices, the stat nothing


def test_the_caller_is_an_argument(tmp_path: Path) -> None:
    # Called directly (no RPC, no interceptor), the domain code answers for the
    # principal it is given: the project's reader finds the image, another
    # principal gets NOT_FOUND, and no auth (None) sees everything.
    payload = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 100
    line = _image_line("u-1", payload)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "s.jsonl").write_bytes(line + b"\n")
    stripped = strip_line(line)
    assert stripped is not None
    pin = stripped.images[0].pin
    media = TranscriptMedia(DirectoryRoot(tmp_path), max_line_size=1 << 20)
    ref = TranscriptImageRef("s", "u-1", 0)
    reader = Principal("alice", frozenset({"proj"}))
    stranger = Principal("bob", frozenset({"other"}))
    assert media.read(reader, ref, pin)[1] == payload
    assert media.read(None, ref, pin)[1] == payload
    with pytest.raises(MediaNotFoundError):
        media.stat(stranger, ref, pin)
    (only,) = media.stat_many(stranger, [(ref, pin, None)])
    assert isinstance(only, MediaNotFoundError)


def test_a_plain_read_never_runs_the_image_decoders(tmp_path: Path) -> None:
    # The facts of a payload (sha256, type, dimensions) come from its header fields:
    # no function of the decoders thumbnails use (scrollback.imaging,
    # media_service.thumbnails) runs for a plain read or stat.
    payload = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 100
    line = _image_line("u-1", payload)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "s.jsonl").write_bytes(line + b"\n")
    stripped = strip_line(line)
    assert stripped is not None
    media = TranscriptMedia(DirectoryRoot(tmp_path), max_line_size=1 << 20)
    ref = TranscriptImageRef("s", "u-1", 0)
    ran: set[str] = set()

    def record(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            ran.add(frame.f_code.co_filename)

    sys.setprofile(record)
    try:
        info, data = media.read(None, ref, stripped.images[0].pin)
        assert media.stat(None, ref, stripped.images[0].pin) == info
    finally:
        sys.setprofile(None)
    assert data == payload and info.safe_inline
    assert any(name.endswith("payload_facts.py") for name in ran)
    decoders = {Path(imaging.__file__).resolve(), Path(thumbnails.__file__).resolve()}
    assert not {Path(name).resolve() for name in ran} & decoders
