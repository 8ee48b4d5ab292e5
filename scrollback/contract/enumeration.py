"""The image-enumeration rule both services share (docs/contract.md §2).

The image with index i of an entry is the i-th object whose "type" is "image"
met in a depth-first walk of `message.content` in document order, descending
into the `content` array of any block that has one. Only `message.content` is
walked; indexes start at 0. The history service mints indexes with this code
and the media service resolves them with the same code.

A rollout line (Codex CLI: a top-level `payload` object and no top-level
`message` member) holds its images as data URLs: its image with index i is
the i-th string whose text is an `image/...` base64 data URL met in a
depth-first walk of `payload` in document order (object members and array
items alike). `iter_images` yields every image of either kind as the pair the
stripper needs: the payload text (None where there is none) and the declared
media type.

A Gemini CLI message (a top-level string `id`, a `type` of Gemini's message
types and no `uuid`, `message` or `payload` member: `is_gemini_message`) holds
its images as `inlineData` parts: its image with index i is the i-th object
met in a depth-first walk of the whole entry in document order (object members
and array items alike: `content`, `displayContent`, each tool call's `result`,
a `functionResponse`'s parts) that has an `inlineData` object whose `mimeType`
is an `image/...` type; the payload text is `inlineData.data`. An entry that
is a Gemini message is named by its `id` where others are by `uuid`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrollback.contract.data_url import is_image_media_type, split_data_url


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


def is_rollout_entry(entry: dict[str, Any]) -> bool:
    """True for a rollout line's shape: a `payload` object and no `message` member."""
    return "message" not in entry and isinstance(entry.get("payload"), dict)


# The message types of Gemini CLI (chatRecordingTypes.ts ConversationRecordExtra).
GEMINI_MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})


def is_gemini_message(entry: dict[str, Any]) -> bool:
    """True for a Gemini CLI message's shape (see the module's text)."""
    return (
        isinstance(entry.get("id"), str)
        and entry.get("type") in GEMINI_MESSAGE_TYPES
        and "uuid" not in entry
        and "message" not in entry
        and "payload" not in entry
    )


def iter_gemini_inline(entry: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The `inlineData` objects of a Gemini message's image parts, in index order."""
    stack: list[Iterator[Any]] = [iter((entry,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                inline = item.get("inlineData")
                media_type = inline.get("mimeType") if isinstance(inline, dict) else None
                if isinstance(media_type, str) and is_image_media_type(media_type):
                    yield inline  # type: ignore[misc]
                stack.append(iter(item.values()))
                break
            if isinstance(item, list):
                stack.append(iter(item))
                break
        else:
            stack.pop()


def iter_images(entry: Any) -> Iterator[tuple[Any, Any]]:
    """Yield (payload text, declared media type) of every image of an entry, in index order.

    For an image block the payload text is `source.data` (any JSON value, or
    None); for a data URL it is the text after the comma.
    """
    if not isinstance(entry, dict):
        return
    if is_gemini_message(entry):
        for inline in iter_gemini_inline(entry):
            yield inline.get("data"), inline.get("mimeType")
        return
    if not is_rollout_entry(entry):
        for block in iter_image_blocks(entry):
            yield image_source_field(block, "data"), image_source_field(block, "media_type")
        return
    for text in _iter_strings(entry["payload"]):
        split = split_data_url(text)
        if split is not None and is_image_media_type(split[0]):
            yield split[1], split[0]


def _iter_strings(value: Any) -> Iterator[str]:
    """Every string value under `value` (never a key), depth first, in document order."""
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, str):
                yield item
            elif isinstance(item, dict):
                stack.append(iter(item.values()))
                break
            elif isinstance(item, list):
                stack.append(iter(item))
                break
        else:
            stack.pop()
