"""The uuid scanners on the shared walker find what their own framing found.

The two scanners of media_service.uuid_scan once framed lines themselves;
their old bodies are kept here, verbatim, as the reference the walker-based
ones are compared with over generated files, chunk sizes, start offsets and
lines over the max line size. The one known difference (a `"uuid"` key with a
raw newline before its value, which no JSONL line holds) is pinned by its own
test.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from media_service import uuid_scan
from media_service.uuid_scan import (
    _KEY_AND_ID,
    _KEY_AND_ID_REACH,
    _KEY_BEFORE,
    _KEY_REACH,
    _KEY_WINDOW,
    Candidate,
    _preceded_by_object_start,
    iter_candidate_lines,
    iter_candidate_lines_many,
)
from scrollback.linefile import ByteSource, LineFile, LocalSource

# The reference scanners read this many bytes a block (uuid_scan.SCAN_CHUNK in the new ones).
SCAN_CHUNK = 1024 * 1024


# The reference: the scanners as they framed lines themselves, verbatim.


def old_candidate_lines(
    fd: ByteSource, entry_uuid: str, max_line_size: int, start: int = 0
) -> Iterator[Candidate]:
    """Every line from `start` (a line start) with a `"uuid"` key equal to `entry_uuid`
    preceded by `{` or `,`.

    Reads the file in SCAN_CHUNK blocks into one reused buffer, keeping an
    overlap for matches across block boundaries, and looks for the quoted
    value with `bytes.find`; only a hit is checked for the key before it.
    Each candidate line is yielded once.
    """
    needle = b'"' + entry_uuid.encode("ascii") + b'"'
    chunk_size = SCAN_CHUNK
    overlap = _KEY_REACH + len(needle)
    buffer = bytearray(overlap + chunk_size)
    view = memoryview(buffer)
    kept = 0  # overlap bytes from the previous block, at the buffer's front
    read_at = start
    line_start_carry = start  # start of the line in effect at `read_at`
    done_until = -1  # candidate lines already yielded end before this offset
    oversize_start = -1
    try:
        while True:
            count = LineFile(fd).read_into(view[kept : kept + chunk_size], read_at)
            if count == 0:
                return
            size = kept + count
            buf_base = read_at - kept
            # Hits ending inside the overlap were seen with the previous block.
            hit = buffer.find(needle, max(0, kept - len(needle) + 1), size)
            while hit >= 0:
                key = _KEY_BEFORE.search(buffer, max(0, hit - _KEY_WINDOW), hit)
                at = buf_base + hit
                if key is not None and at >= done_until:
                    key_start = key.start()
                    newline = buffer.rfind(b"\n", 0, key_start)
                    start = buf_base + newline + 1 if newline >= 0 else line_start_carry
                    if start != oversize_start and _preceded_by_object_start(
                        fd, buffer, key_start, buf_base
                    ):
                        end = LineFile(fd).line_end(start, max_line_size, at + len(needle))
                        if end is None:
                            oversize_start = start
                            yield Candidate(start, None)
                        else:
                            done_until = end
                            yield Candidate(start, LineFile(fd).read(end - start, start))
                hit = buffer.find(needle, hit + 1, size)
            newline = buffer.rfind(b"\n", kept, size)
            if newline >= 0:
                line_start_carry = buf_base + newline + 1
            read_at += count
            keep = min(overlap, size)
            buffer[:keep] = buffer[size - keep : size]
            kept = keep
    finally:
        view.release()


def old_candidate_lines_many(
    fd: ByteSource, wanted: frozenset[str], max_line_size: int, on_slice: Callable[[], None]
) -> Iterator[tuple[str, Candidate]]:
    """(id, line) for every line with a `"uuid"` key whose value is in `wanted`.

    One pass over the file whatever the number of ids: each `"uuid"` key is
    found with `bytes.find`, its value read by an anchored regex and looked up
    in `wanted`; a hit is kept only when the key is preceded by `{` or `,`.
    `on_slice` runs before each slice is read (it raises to stop the pass).
    Each (id, line) is yielded once.
    """
    reach = _KEY_AND_ID_REACH
    buffer = bytearray(reach + SCAN_CHUNK)
    view = memoryview(buffer)
    kept = 0
    read_at = 0
    line_start_carry = 0  # start of the line in effect at the buffer's first byte
    seen: set[tuple[str, int]] = set()
    try:
        while True:
            on_slice()
            count = LineFile(fd).read_into(view[kept : kept + SCAN_CHUNK], read_at)
            size = kept + count
            buf_base = read_at - kept
            # Keys starting in the last `reach` bytes are looked at with the next slice.
            limit = size if count == 0 else size - reach
            hit = buffer.find(b'"uuid"', 0, max(limit, 0))
            while hit >= 0:
                match = _KEY_AND_ID.match(buffer, hit, size)
                if match is not None:
                    entry_id = match.group(1).decode("ascii")
                    if entry_id in wanted:
                        newline = buffer.rfind(b"\n", 0, hit)
                        start = buf_base + newline + 1 if newline >= 0 else line_start_carry
                        if (entry_id, start) not in seen and _preceded_by_object_start(
                            fd, buffer, hit, buf_base
                        ):
                            seen.add((entry_id, start))
                            end = LineFile(fd).line_end(
                                start, max_line_size, buf_base + match.end()
                            )
                            if end is None:
                                yield entry_id, Candidate(start, None)
                            else:
                                yield (
                                    entry_id,
                                    Candidate(start, LineFile(fd).read(end - start, start)),
                                )
                hit = buffer.find(b'"uuid"', hit + 1, max(limit, 0))
            if count == 0:
                return
            newline = buffer.rfind(b"\n", 0, max(limit, 0))
            if newline >= 0:
                line_start_carry = buf_base + newline + 1
            keep = size - max(limit, 0)
            buffer[:keep] = buffer[size - keep : size]
            kept = keep
            read_at += count
    finally:
        view.release()


SPACES = st.text(alphabet=" \t\r", max_size=20)  # no raw newline inside a line
IDS = ("u-t", "u-o", "a_b", "u-t-longer")


@st.composite
def transcripts(draw: st.DrawFn) -> bytes:
    """Lines holding uuids in many shapes: keys, values, text, nesting, odd spacing, long pads."""
    lines: list[bytes] = []
    for _ in range(draw(st.integers(0, 10))):
        pad = "p" * draw(st.sampled_from([0, 1, 7, 40, 90, 300]))
        uid = draw(st.sampled_from(IDS))
        shape = draw(st.sampled_from(["top", "parent", "nested", "text", "tail", "blank", "twice"]))
        before, after = draw(SPACES), draw(SPACES)
        lead = draw(st.sampled_from(["{", "{ ", '{"x":1,', '{"x":1 , ', '{"x":[1]', "[", " "]))
        if shape == "top":
            body = f'{lead}"uuid"{before}:{after}"{uid}","pad":"{pad}"}}'
        elif shape == "tail":
            body = f'{{"pad":"{pad}"{before},{after}"uuid":"{uid}"}}'
        elif shape == "parent":
            body = f'{{"parentUuid":"{uid}","uuid":"u-o","pad":"{pad}"}}'
        elif shape == "nested":
            body = f'{{"uuid":"u-o","r":{{"uuid"{before}:{after}"{uid}"}},"pad":"{pad}"}}'
        elif shape == "text":
            body = f'{{"uuid":"u-o","t":"\\"uuid\\":\\"{uid}\\" uuid: \\"{uid}\\"{pad}"}}'
        elif shape == "twice":
            body = f'{{"uuid":"{uid}","a":{{"uuid":"{uid}"}},"uuid" : "{uid}","pad":"{pad}"}}'
        else:
            body = ""
        lines.append(body.encode())
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


def _with_file(data: bytes, chunk: int, read: Callable[[ByteSource], object]) -> object:
    """`read` over a temporary file holding `data`, both scanners' block size set to `chunk`."""
    global SCAN_CHUNK
    original, reference = uuid_scan.SCAN_CHUNK, SCAN_CHUNK
    uuid_scan.SCAN_CHUNK = SCAN_CHUNK = chunk
    fd, name = tempfile.mkstemp()
    try:
        os.write(fd, data)
        return read(LocalSource(fd))
    finally:
        uuid_scan.SCAN_CHUNK, SCAN_CHUNK = original, reference
        os.close(fd)
        os.unlink(name)


def _line_starts(data: bytes) -> list[int]:
    return [0] + [i + 1 for i, byte in enumerate(data) if byte == 0x0A]


@settings(max_examples=400, deadline=None)
@given(
    transcripts(),
    st.sampled_from(IDS),
    st.integers(1, 300),
    st.sampled_from([20, 60, 150, 10_000]),
    st.data(),
)
def test_one_id_scan_finds_what_the_old_framing_found(
    data: bytes, entry_uuid: str, chunk: int, max_line: int, draw: st.DataObject
) -> None:
    start = draw.draw(st.sampled_from(_line_starts(data)))

    def both(fd: ByteSource) -> tuple[list[Candidate], list[Candidate]]:
        new = list(iter_candidate_lines(fd, entry_uuid, max_line, start))
        old = list(old_candidate_lines(fd, entry_uuid, max_line, start))
        return new, old

    new, old = _with_file(data, chunk, both)  # type: ignore[misc]
    assert new == old


@settings(max_examples=400, deadline=None)
@given(
    transcripts(),
    st.frozensets(st.sampled_from(IDS), max_size=4),
    st.integers(1, 300),
    st.sampled_from([20, 60, 150, 10_000]),
)
def test_many_id_scan_finds_what_the_old_framing_found(
    data: bytes, wanted: frozenset[str], chunk: int, max_line: int
) -> None:
    slices = [0, 0]

    def both(fd: ByteSource) -> tuple[list[tuple[str, Candidate]], list[tuple[str, Candidate]]]:
        def count(which: int) -> Callable[[], None]:
            def on_slice() -> None:
                slices[which] += 1

            return on_slice

        new = list(iter_candidate_lines_many(fd, wanted, max_line, count(0)))
        old = list(old_candidate_lines_many(fd, wanted, max_line, count(1)))
        return new, old

    new, old = _with_file(data, chunk, both)  # type: ignore[misc]
    assert new == old
    assert slices[0] >= 1 and slices[1] >= 1


def test_a_key_with_a_newline_before_its_value_is_no_line_key() -> None:
    """The one difference, malformed files only: the old framing gave the key's line start
    through the value's line end as one line; the walker takes such a key to belong to no
    line."""
    data = b'{"a":1}\n{"uuid":\n"u-t","b":2}\n{"uuid":"u-t"}\n'

    def both(fd: ByteSource) -> tuple[list[Candidate], list[Candidate]]:
        return list(iter_candidate_lines(fd, "u-t", 1000)), list(
            old_candidate_lines(fd, "u-t", 1000)
        )

    new, old = _with_file(data, 64, both)  # type: ignore[misc]
    assert new == [Candidate(30, b'{"uuid":"u-t"}')]
    assert old == [Candidate(8, b'{"uuid":\n"u-t","b":2}'), Candidate(30, b'{"uuid":"u-t"}')]
