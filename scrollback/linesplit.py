"""Lines walked newest first by splitting whole blocks: the image list's backward pass.

`linewalk.lines_backward` searches each newline on its own and checks every
line against the line budget, which suits a window of a few hundred entries;
the image list's chain walk may go back over every line of a transcript, so
here each block is split at C speed and its lines come as plain tuples. A line
over the max line size is never held: its bytes come as None.
"""

from __future__ import annotations

from collections.abc import Iterator

from scrollback.linefile import NEWLINE, ByteSource, LineFile
from scrollback.linewalk import Changed, SourceShrankError

# One line: (start, end, its bytes or None when over the max line size), newline excluded.
SplitLine = tuple[int, int, bytes | None]


def complete_end(source: ByteSource, size: int, block_bytes: int) -> int:
    """Where the complete lines of [0, size) end (just after the last newline), or 0."""
    end = size
    while end > 0:
        start = max(0, end - block_bytes)
        block = LineFile(source).read(end - start, start)
        found = block.rfind(NEWLINE)
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def split_lines_backward(
    source: ByteSource,
    end: int,
    max_line: int,
    block_bytes: int,
    changed: Changed = SourceShrankError,
) -> Iterator[SplitLine]:
    """The lines before `end` (0 or just after a newline), newest first, `block_bytes` at a time."""
    if end <= 0:
        return
    line_end = position = end - 1  # the newline ending the line being gathered
    pieces: list[bytes] = []  # its bytes gathered so far, newest first
    held = 0
    while position > 0:
        start = max(0, position - block_bytes)
        block = LineFile(source).read(position - start, start)
        if len(block) != position - start:
            raise changed()
        parts = block.split(NEWLINE)
        if len(parts) > 1:
            last = parts[-1]
            line_start = position - len(last)
            size = line_end - line_start
            data = b"".join([last, *reversed(pieces)]) if size <= max_line else None
            yield line_start, line_end, data
            line_end = line_start - 1
            for k in range(len(parts) - 2, 0, -1):
                text = parts[k]
                line_start = line_end - len(text)
                yield line_start, line_end, text if len(text) <= max_line else None
                line_end = line_start - 1
            pieces.clear()
            held = 0
        first = parts[0]
        held += len(first)
        if held <= max_line:
            pieces.append(first)
        else:
            pieces.clear()  # a line over the max line size: none of it is kept
        position = start
    yield 0, line_end, b"".join(reversed(pieces)) if line_end <= max_line else None
