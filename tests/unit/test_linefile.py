"""The line rules of scrollback.linefile and the walks of scrollback.linewalk, against a model of
the file's lines, over a local file and a MemorySource (an ObjectSource: tests/integration/objectstore)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrollback import linefile
from scrollback.linefile import LineFile, LocalSource
from scrollback.linewalk import find_key
from scrollback.memory_source import MemorySource
from tests.support.line_rules import (
    BODIES,
    LONG_BODIES,
    check_line_rules,
    check_walks,
    joined,
)


@contextmanager
def opened(data: bytes) -> Iterator[LineFile]:
    with tempfile.NamedTemporaryFile() as file:
        file.write(data)
        file.flush()
        fd = LocalSource(os.open(file.name, os.O_RDONLY))
        try:
            yield LineFile(fd)
        finally:
            fd.close()


@contextmanager
def in_memory(data: bytes) -> Iterator[LineFile]:
    with MemorySource(data) as source:
        yield LineFile(source)


SOURCES = {"local": opened, "memory": in_memory}


@pytest.mark.parametrize("kind", SOURCES)
@given(st.lists(BODIES, max_size=8), st.booleans())
def test_every_rule_agrees_with_the_model(
    kind: str, bodies: list[bytes], unterminated: bool
) -> None:
    data = joined(bodies, unterminated)
    with SOURCES[kind](data) as file:
        check_line_rules(file, data)
        check_walks(file.source, data, max_line=30)


@pytest.mark.parametrize("kind", SOURCES)
@settings(max_examples=15, deadline=None)
@given(st.lists(LONG_BODIES, max_size=5), st.booleans())
def test_walks_of_lines_longer_than_a_block_agree_with_the_model(
    kind: str, bodies: list[bytes], unterminated: bool
) -> None:
    data = joined(bodies, unterminated)
    with SOURCES[kind](data) as file:
        check_walks(file.source, data, max_line=500_000)


def test_a_memory_source_changes_under_its_readers() -> None:
    source = MemorySource(b'{"a":1}\n', ino=7)
    file = LineFile(source)
    assert source.stat().st_size == 8 and source.stat().st_ino == 7
    source.append(b'{"b":2}\n')
    assert file.line_at(8, 7) == b'{"b":2}'
    source.replace(b"x" * 20, ino=8)
    assert file.line_at(8, 7) is None and source.stat().st_ino == 8
    assert source.dup().read(3, 0) == b"xxx"


def test_a_tail_longer_than_the_max_line_asks_the_index() -> None:
    data = b'{"a":1}\n' + b"y" * 5000
    with opened(data) as file:
        assert file.tail_start(len(data), 100) == 8  # no index: the scan goes on back
        assert file.tail_start(len(data), 100, lambda: -7) == -7
        assert file.tail_start(len(data), 10_000, lambda: -7) == 8  # within the bound: read


def test_line_from_reads_at_most_the_max_line_size(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        reads.append(length)
        return real(fd, length, offset)

    monkeypatch.setattr(linefile, "FIRST_READ_BYTES", 1000)
    with opened(b"z" * 100_000 + b"\n") as file:
        monkeypatch.setattr(os, "pread", counting)
        assert file.line_from(0, 5000) is None
        assert sum(reads) <= 5001
        reads.clear()
        assert file.line_from(0, 100_000) == b"z" * 100_000
        assert sum(reads) <= 100_001 and len(reads) <= 1 + 5  # reads growing fourfold


def test_an_exact_reader_refuses_reads_outside_its_line_and_a_shrunk_file() -> None:
    class Shrank(Exception):
        pass

    with opened(b"abcdef\n") as file:
        read = file.line_reader(1, 4, Shrank)
        assert read(0, 4) == b"bcde"
        with pytest.raises(ValueError):
            read(2, 3)
        with pytest.raises(Shrank):
            file.line_reader(5, 10, Shrank)(0, 10)


def test_line_from_cases() -> None:
    data = b'{"a":1}\n{"b":22}\r\n' + b"x" * 20 + b"\n" + b'{"tail":1}'
    with opened(data) as file:
        assert file.line_from(0, 1024) == b'{"a":1}'
        assert file.line_from(8, 1024) == b'{"b":22}\r'  # a carriage return is the line's
        assert file.line_from(1, 1024) is None  # not the start of a line
        assert file.line_from(7, 1024) is None  # the newline itself
        assert file.line_from(18, 20) == b"x" * 20  # exactly the max line size
        assert file.line_from(18, 19) is None  # one byte over
        assert file.line_from(39, 1024) == b'{"tail":1}'  # unterminated last line
        assert file.line_from(len(data), 1024) is None  # the end of the file
        assert file.line_from(len(data) + 100, 1024) is None
        assert file.line_from(-1, 1024) is None


class CountingSource(LocalSource):
    """A LocalSource that counts the bytes read through it."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self.read_bytes = 0

    def read(self, length: int, offset: int) -> bytes:
        data = super().read(length, offset)
        self.read_bytes += len(data)
        return data


def test_tail_scans_search_a_tail_once_per_version_and_then_only_new_bytes() -> None:
    tail = 3 * linefile.REMEMBERED_TAIL_BYTES
    with tempfile.NamedTemporaryFile() as file:
        file.write(b'{"a":1}\n' + b"y" * tail)
        file.flush()
        source = CountingSource(os.open(file.name, os.O_RDONLY))
        try:
            scans = linefile.TailScans()
            size = 8 + tail
            version = linefile.FileVersion.of(source)
            assert scans.tail_start(source, version, size) == 8
            source.read_bytes = 0
            assert scans.tail_start(source, version, size) == 8
            assert source.read_bytes < 2 * linefile.TAIL_MARK_BYTES  # the last byte and the mark
            assert scans.clear_to(source, version, 8, size) == size
            assert scans.clear_to(source, version, 0, size) == 0  # another start: unknown
            file.write(b"z" * 1000 + b"\n" + b"w" * 10)  # grows: a newline, a new short tail
            file.flush()
            source.read_bytes = 0
            grown = size + 1011
            assert scans.tail_start(source, version, grown) == size + 1001
            assert source.read_bytes < 2000  # only what was appended
            # Rewritten in place under the same version: the mark no longer holds.
            os.pwrite(file.fileno(), b"\n" * 64, size - 64)
            assert scans.clear_to(source, version, 8, grown) == 8
            assert scans.tail_start(source, version, size) == size
        finally:
            source.close()


def test_find_key_passes_over_a_key_across_lines() -> None:
    # `"uuid":` ends one line and its value starts the next: neither line holds the key.
    data = b'{"a":1,"uuid":\n"u1"}\n{"uuid":"u1"}\n'

    def finder(
        buffer: bytearray, lo: int, hi: int, end: int, base: int
    ) -> Iterator[tuple[int, int, None]]:
        hit = buffer.find(b'"u1"', lo, min(end, hi + 3))
        while hit >= 0:
            key = buffer.rfind(b'"uuid"', 0, hit)
            if key >= 0:
                yield key, base + hit + 4, None
            hit = buffer.find(b'"u1"', hit + 1, min(end, hi + 3))

    for chunk in (5, 64):
        found = list(find_key(MemorySource(data), finder, 1000, chunk=chunk, context=16, reach=3))
        assert [(f.start, f.data) for f in found] == [(21, b'{"uuid":"u1"}')], chunk
