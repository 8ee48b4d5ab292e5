"""Entry-cache stamps (history_service.entry_cache): when a cached entry's check may be skipped,
and the row reads (history_service.lines.RowReads) that checks would need, made only when asked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from history_service.entry_cache import EntryCache, mark_of
from history_service.lines import RowReads
from history_service.window_wire import EncodedEntry
from scrollback.linefile import LocalSource
from scrollback.transcripts import SETTLED_SECONDS, stamp_of

SCOPE = (1, 2, 3, "session", 0, 32768)
ENTRY = EncodedEntry(offset=100, line_size=50, json_size=40, item=b"\n\x02{}", head=2)


def test_a_file_changed_just_now_has_no_stamp(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"{}\n")
    stat = os.stat(path)
    assert stamp_of(stat, stat.st_ctime_ns) is None
    assert stamp_of(stat, stat.st_ctime_ns + int(SETTLED_SECONDS * 1e9) - 1) is None
    later = stat.st_ctime_ns + int(SETTLED_SECONDS * 1e9)
    assert stamp_of(stat, later) == (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class Marks:
    """A line's mark read from the file, counted."""

    def __init__(self, value: int | None) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> int | None:
        self.calls += 1
        return self.value


@pytest.mark.parametrize("stored_stamp", [None, (10, 20, 30)])
def test_a_hit_is_checked_unless_stamped_under_the_same_stamp(
    stored_stamp: tuple[int, int, int] | None,
) -> None:
    cache = EntryCache()
    cache.put(SCOPE, 7, ENTRY, stored_stamp)
    now = (10, 20, 30)
    first = Marks(7)
    assert cache.lookup(SCOPE, 100, 50, now, first) is ENTRY
    assert first.calls == (0 if stored_stamp == now else 1)
    # Checked once under the present stamp: not again while it holds.
    again = Marks(7)
    assert cache.lookup(SCOPE, 100, 50, now, again) is ENTRY
    assert again.calls == 0
    # Another stamp (the file changed since), or none (it has not settled): checked.
    for stamp in [(10, 20, 31), None]:
        wrong = Marks(8)
        assert cache.lookup(SCOPE, 100, 50, stamp, wrong) is None
        assert wrong.calls == 1
    assert cache.lookup(SCOPE, 100, 50, None, Marks(None)) is None
    assert cache.lookup(SCOPE, 100, 51, now, Marks(7)) is None  # another line


def test_row_reads_read_nothing_until_asked(tmp_path: Path) -> None:
    # A batch whose rows all hit stamped entries never touches the file.
    path = tmp_path / "t.jsonl"
    lines = [b'{"n":%d}' % n for n in range(5)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    rows = [(sum(len(x) + 1 for x in lines[:n]), len(lines[n])) for n in range(5)]
    fd = LocalSource(os.open(path, os.O_RDONLY))
    reads = RowReads(fd, rows)
    fd.close()  # were anything read at construction, it would be read by now
    with pytest.raises(OSError):
        reads.mark(*rows[0])
    fd = LocalSource(os.open(path, os.O_RDONLY))
    try:
        reads = RowReads(fd, rows)
        assert reads.mark(*rows[2]) == mark_of(rows[2][0], lines[2])
    finally:
        fd.close()
