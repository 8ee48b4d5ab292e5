"""How refs name an opencode message's images: by the part that holds them.

A window's entry is a message (scrollback.opencode.view); its images are
numbered over the whole line (docs/contract.md §2: a rollout's rule, so the
message's own data first, then each part in id order). A ref names an image
of a part as `<session>/<part id>/<index within that part>`, and one in the
message's own data (none in what opencode writes) as
`<session>/<message id>/<index in the line>`. `image_names` gives the part
names from a stripped line (history, when it mints refs); the media service
turns a part's name back into the message's (`PartImages.entry_of_part`) and
finds the image as for any other ref, pin checked.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import orjson

from scrollback.contract.enumeration import iter_images
from scrollback.contract.refs import has_usable_uuid
from scrollback.contract.stripping import StrippedLine
from scrollback.transcripts import TranscriptFile


def images_in(data: Any) -> int:
    """How many images a message's or part's data holds, by the rollout rule."""
    if not isinstance(data, dict):
        return 0
    return sum(1 for _ in iter_images({"payload": data}))


def image_names(stripped: StrippedLine) -> dict[int, tuple[str, int]]:
    """Line index -> (part id, index within the part) of each image a named part holds."""
    if stripped.oversize:
        return {}
    try:
        entry = orjson.loads(stripped.json)
    except orjson.JSONDecodeError:
        return {}
    return entry_image_names(entry)


def entry_image_names(entry: Any) -> dict[int, tuple[str, int]]:
    """`image_names` of a parsed line (stripped, or probed with placeholders in its cuts)."""
    payload = entry.get("payload") if isinstance(entry, dict) else None
    if not isinstance(payload, dict) or not isinstance(payload.get("parts"), list):
        return {}
    names: dict[int, tuple[str, int]] = {}
    first = images_in(payload.get("message"))
    for part in payload["parts"]:
        if not isinstance(part, dict):
            continue
        count = images_in(part.get("data"))
        part_id = part.get("id")
        if isinstance(part_id, str) and has_usable_uuid(part_id):
            names.update((first + k, (part_id, k)) for k in range(count))
        first += count
    return names


@runtime_checkable
class PartImages(Protocol):
    """A source whose refs may name a part: (message id, index in its line) of a part's image."""

    def entry_of_part(
        self, transcript: TranscriptFile, part_id: str, index: int
    ) -> tuple[str, int] | None: ...
