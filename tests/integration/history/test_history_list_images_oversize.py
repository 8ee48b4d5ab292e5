"""ListImages counts an entry still too large once stripped as the API would: on its chain.

Such a line (over the max line size, 16 MiB, with no payload to cut) is never
parsed; the window serves its stub, and the numbering reads its top-level
`uuid`, `parentUuid` and `type` textually as the stub does
(docs/contract.md §14). Left out, the chain would lose it: an oversize root
shifts every message number down by one, an oversize head leaves the chain on
the branch it replaced.
"""

from __future__ import annotations

import json
from typing import Any

from scrollback.history.v1 import history_pb2 as hpb
from tests.support.history import HarnessFactory
from tests.support.rescue import image_block, noisy_png

# Text past the default max line size (16 MiB), so the line stays oversize once stripped.
HUGE_TEXT = "word " * (17 * 1024 * 1024 // 5)


def _entry(kind: str, uuid: str, parent: str | None, *content: Any) -> bytes:
    body = [{"type": "text", "text": "x"}, *content]
    value = {"type": kind, "uuid": uuid, "parentUuid": parent, "message": {"content": body}}
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def _huge(uuid: str, parent: str | None) -> bytes:
    return _entry("user", uuid, parent, {"type": "text", "text": HUGE_TEXT})


async def _api_paths(harness: Any, session_id: str) -> list[str]:
    request = hpb.ListImagesRequest(session_id=session_id)
    return [m.image.api_path async for m in harness.stub.ListImages(request) if m.HasField("image")]


async def test_an_oversize_root_keeps_its_place_in_the_numbering(
    history_server: HarnessFactory,
) -> None:
    picture = image_block(noisy_png(20, 20))
    async with history_server() as harness:
        harness.transcript("root").write_bytes(
            _huge("u1", None)
            + _entry("assistant", "a1", "u1")
            + _entry("user", "u2", "a1", picture)
            + _entry("assistant", "a2", "u2")
        )
        assert await _api_paths(harness, "root") == ["messages.2.content.1"]


async def test_an_oversize_last_entry_heads_the_chain(history_server: HarnessFactory) -> None:
    picture = image_block(noisy_png(20, 20))
    async with history_server() as harness:
        harness.transcript("head").write_bytes(
            _entry("user", "u1", None, picture)
            + _entry("assistant", "a1", "u1")
            + _entry("user", "u2", "a1", picture)  # replaced by the retry below
            + _huge("u3", "a1")
        )
        assert await _api_paths(harness, "head") == ["messages.0.content.1", ""]
