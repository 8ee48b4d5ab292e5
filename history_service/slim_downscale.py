"""Downscaling one image block of a slim copy (`scrollback slim --downscale`).

A downscale never holds an image whole: its payload is read slice by slice
from the line (`PayloadReader`) and shrunk while libvips decodes it
(scrollback.imaging). The copy does not decode itself: `downscale_block`
yields a `Downscale` request and is sent back the answer, so the copy's
driver runs the decode under the worker's decode budget
(scrollback.server.decode_budget) and may refuse one that does not fit it; an
image not downscaled is cut, its stand-in text naming why.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import pybase64

from history_service.slim_blocks import (
    FoundBlock,
    LineSource,
    declared_type,
    dumps_json,
    inline_payload,
    with_image,
)
from scrollback.contract.extraction import (
    ImageNotStrippedError,
    PayloadReader,
    UndecodablePayloadError,
)
from scrollback.contract.stripping import ProbedLine
from scrollback.imaging import UndecodableImageError, buffered, decode_cost, shrink_on_load

if TYPE_CHECKING:
    import pyvips

# The API's limits on one image (its documented maximums).
API_MAX_SIDE = 2000
API_MAX_BYTES = 5 * 1024 * 1024
API_HARD_MAX_SIDE = 8000
# More images than this in one request and each must be within API_MAX_SIDE.
API_MANY_IMAGES = 20
# The smallest --max-side and --max-bytes a request may ask for.
MIN_MAX_SIDE = 16
MIN_MAX_BYTES = 1024
# Images over this many pixels are never decoded for a downscale (a bomb).
MAX_DECODE_PIXELS = 64_000_000
JPEG_QUALITY = 85

# Why an image was not downscaled, as its stand-in text says.
NOT_DECODABLE = "not a decodable PNG, JPEG, GIF or WebP"
OVER_DECODE_PIXELS = f"over {MAX_DECODE_PIXELS:,} pixels, never decoded"
OVER_DECODE_BUDGET = "larger than the server's decode memory budget, never decoded"
NOT_BASE64 = "not valid base64, never decoded"


def does_not_fit(max_bytes: int) -> str:
    """The reason of an image that stays over `max_bytes` at the smallest side tried."""
    return f"does not fit in {max_bytes:,} bytes"


@dataclass(frozen=True, slots=True)
class Downscaled:
    """An image re-encoded within the limits: its media type and bytes."""

    media_type: str
    data: bytes


# The answer to a Downscale: the new image, or why there is none.
DownscaleAnswer = Downscaled | str


@dataclass(frozen=True, slots=True)
class Downscale:
    """A decode `slim_file` asks its driver for; the driver sends back `work()`'s answer.

    `cost` is the most the decode may hold (scrollback.imaging's `decode_cost`);
    `work` blocks and may run on any thread.
    """

    cost: int
    work: Callable[[], DownscaleAnswer]


def downscale_image(
    open_image: Callable[[], IO[bytes]],
    pixels: int,
    max_side: int,
    max_bytes: int,
    png: bool = False,
) -> DownscaleAnswer:
    """The image re-encoded within max_side and max_bytes, or why not (blocking).

    Shrunk while decoded (scrollback.imaging), once, to at most max_side; then,
    at each size from there down by quarters until the bytes fit: PNG where it has
    transparency; a PNG (a screenshot's text stays sharp) as PNG where that fits,
    else as JPEG at the same size; anything else as JPEG. `pixels` is what its
    header states, already checked by the caller; `png` whether the original is one.
    """

    def encode(frame: pyvips.Image) -> DownscaleAnswer:
        if frame.interpretation not in ("srgb", "b-w"):
            frame = frame.colourspace("srgb")  # CMYK, 16-bit: what the API takes
        frame = frame.copy_memory()  # the shrunk frame, decoded once for every step
        longest = max(frame.width, frame.height)
        side = longest
        while side >= MIN_MAX_SIDE:
            step = frame if side == longest else frame.thumbnail_image(side, height=side)
            if frame.hasalpha() or png:
                data = step.pngsave_buffer(keep="none")
                if len(data) <= max_bytes:
                    return Downscaled("image/png", data)
            if not frame.hasalpha():
                data = step.jpegsave_buffer(Q=JPEG_QUALITY, keep="none")
                if len(data) <= max_bytes:
                    return Downscaled("image/jpeg", data)
            side = side * 3 // 4
        return does_not_fit(max_bytes)

    try:
        with open_image() as stream:
            return shrink_on_load(stream, pixels, max_side, encode)
    except (UndecodableImageError, UndecodablePayloadError, ImageNotStrippedError):
        return NOT_DECODABLE


def payload_opener(
    source: LineSource, probed: ProbedLine, block: FoundBlock
) -> Callable[[], IO[bytes]]:
    """A function opening the block's decoded payload as a file, read slice by slice."""
    assert block.facts is not None
    size = block.facts.size_bytes
    if block.cut < 0:
        decoded = pybase64.b64decode(inline_payload(block.block).encode("ascii"))
        return lambda: io.BytesIO(decoded)
    start, end = probed.spans[block.cut]
    # Escaped is always right (escapes are undone as the payload is decoded forward).
    reader = PayloadReader(source.read, start, end, escaped=True, index=block.image_index)
    return lambda: buffered(reader.read, size)


def downscale_block(
    source: LineSource, probed: ProbedLine, block: FoundBlock, max_side: int, max_bytes: int
) -> Generator[Downscale, DownscaleAnswer | None, bytes | str | None]:
    """One decodable image block within the limits: None when it fits as it is, else its
    downscaled block's JSON, or why it was not downscaled (a generator: it yields the
    Downscale to run, and is sent back the answer)."""
    facts = block.facts
    assert facts is not None
    header = facts.header
    if header is None:
        return NOT_DECODABLE
    if (
        max(header.width, header.height) <= max_side
        and facts.size_bytes <= max_bytes
        and header.media_type == declared_type(block.block)
    ):
        return None
    if header.pixels > MAX_DECODE_PIXELS:
        return OVER_DECODE_PIXELS
    work = functools.partial(
        downscale_image,
        payload_opener(source, probed, block),
        header.pixels,
        max_side,
        max_bytes,
        header.media_type == "image/png",
    )
    answer = yield Downscale(decode_cost(header.media_type, header.pixels, facts.size_bytes), work)
    if not isinstance(answer, Downscaled):
        return answer or NOT_DECODABLE
    return dumps_json(with_image(block.block, answer.media_type, answer.data))
