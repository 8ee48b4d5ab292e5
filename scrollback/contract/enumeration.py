"""The image-enumeration rule both services share (docs/contract.md §2).

The image with index i of an entry is the i-th object whose "type" is "image"
met in a depth-first walk of `message.content` in document order, descending
into the `content` array of any block that has one. Only `message.content` is
walked; indexes start at 0. The history service mints indexes with this code
and the media service resolves them with the same code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def iter_image_blocks(entry: Any) -> Iterator[dict[str, Any]]:
    """Yield the image blocks of a parsed entry, in index order."""
    if not isinstance(entry, dict):
        return
    message = entry.get("message")
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if not isinstance(content, list):
        return
    # An explicit stack of iterators: pre-order, document order, no recursion
    # limit to trip over on hostile nesting.
    stack: list[Iterator[Any]] = [iter(content)]
    while stack:
        for block in stack[-1]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                yield block
            inner = block.get("content")
            if isinstance(inner, list):
                stack.append(iter(inner))
                break
        else:
            stack.pop()


def image_source_field(block: dict[str, Any], field: str) -> Any:
    """Return `block["source"][field]`, or None where the shape differs."""
    source = block.get("source")
    if isinstance(source, dict):
        return source.get(field)
    return None
