"""The messages a window is sent as: the one-batch fast path sends what the per-entry path sends."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from history_service.window_wire import EncodedEntry, window_responses
from history_service.windows import HeldBack, Window
from scrollback.history.v1 import history_pb2 as pb
from scrollback.linefile import FileIdentity, FileVersion
from scrollback.server.serialized import Serialized, length_delimited

_ENTRIES = pb.EntryBatch.DESCRIPTOR.fields_by_name["entries"].number


def _encoded(index: int, json_bytes: int) -> EncodedEntry:
    data = pb.Entry(json="x" * json_bytes, byte_offset=index).SerializeToString()
    item = length_delimited(_ENTRIES, data)
    return EncodedEntry(
        offset=index * 1000,
        line_size=json_bytes,
        json_size=json_bytes,
        item=item,
        head=len(item) - len(data),
    )


def _window(entries: tuple[EncodedEntry | HeldBack, ...]) -> Window:
    return Window(
        entries=entries,
        skipped_lines=1,
        file_size=123_456,
        next_page_token="next",
        identity=FileIdentity(FileVersion(1, 2, 3, 4), 123_456),
        newest_end=123_000,
    )


async def _wire(window: Window, links: Mapping[str, str] | None, budget: int) -> list[bytes]:
    return [
        message.wire if isinstance(message, Serialized) else message.SerializeToString()
        async for message in window_responses(
            pb.ReadWindowResponse, "s", window, links, max_batch_bytes=budget
        )
    ]


@pytest.mark.parametrize(
    ("sizes", "budget"),
    [
        ([10, 200, 3000], 1 << 20),  # one batch: the fast path
        ([10] * 200, 1 << 20),
        ([5000, 5000, 5000], 12_000),  # over the budget: several batches
        ([20_000, 10], 12_000),  # an entry alone, then a batch
    ],
)
async def test_a_window_is_sent_as_the_per_entry_path_sends_it(
    sizes: list[int], budget: int
) -> None:
    window = _window(tuple(_encoded(i, size) for i, size in enumerate(sizes)))
    # Links no entry names take the per-entry path and change nothing.
    per_entry = await _wire(window, {"toolu_none": "agent"}, budget)
    fast = await _wire(window, None, budget)
    assert fast == per_entry
    end = pb.ReadWindowResponse.FromString(fast[-1])
    assert end.end.next_page_token == "next" and end.end.file_size_bytes == 123_456
    batched = [pb.ReadWindowResponse.FromString(wire) for wire in fast[:-1]]
    sent = [
        entry.byte_offset
        for message in batched
        for entry in (message.entries.entries if message.HasField("entries") else [message.entry])
    ]
    assert sent == list(range(len(sizes)))


async def test_a_small_window_is_one_batch_and_its_end() -> None:
    window = _window(tuple(_encoded(i, 100) for i in range(200)))
    wires = await _wire(window, None, 1 << 20)
    assert len(wires) == 2
    assert len(pb.ReadWindowResponse.FromString(wires[0]).entries.entries) == 200
