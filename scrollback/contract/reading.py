"""The one reader type of a byte range: `read(offset, length) -> bytes`.

Stripping, extraction, the top-level tokenizer, slim and the line walker read
lines (or a whole file) through it, whatever holds the bytes: a file, an
object in a bucket, a line in memory. Offsets are relative to what the reader
covers; a read past its end comes back short.
"""

from __future__ import annotations

from collections.abc import Callable

ByteReader = Callable[[int, int], bytes]
