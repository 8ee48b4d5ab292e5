"""EntryBatch: ReadWindow and Bootstrap pack small entries when asked, and only small ones."""

from __future__ import annotations

import base64
from typing import Any

from scrollback.history.v1 import history_pb2 as pb
from tests.support.history import HistoryHarness, collect, line

MIB = 1024 * 1024
# Held back by the window (json over 256 KiB): never batched, sent alone.
LARGE_PAD = "word " * 70_000


def _write_session(history: HistoryHarness) -> list[str]:
    """A transcript of small entries, two held-back large ones and some images."""
    image = base64.b64encode(bytes(range(256)) * 200).decode()
    uuids = []
    with open(history.transcript("mixed"), "wb") as handle:
        for n in range(180):
            uuid = f"u{n}"
            uuids.append(uuid)
            content: list[dict[str, Any]] = [{"type": "text", "text": f"hello {n} " * (n % 9)}]
            if n % 25 == 0:
                content.append(
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": image},
                    }
                )
            fields: dict[str, Any] = {"type": "user", "uuid": uuid, "message": {"content": content}}
            if n in (60, 150):
                fields["pad"] = LARGE_PAD
            handle.write(line(**fields))
    return uuids


async def _messages(stream: Any) -> list[Any]:
    return [message async for message in stream]


async def _replay(messages: list[Any]) -> Any:
    async def again() -> Any:
        for message in messages:
            yield message

    return await collect(again())


async def test_batches_pack_small_entries_and_keep_large_ones_alone(
    history: HistoryHarness,
) -> None:
    uuids = _write_session(history)
    alone_messages = await _messages(
        history.stub.ReadWindow(pb.ReadWindowRequest(session_id="mixed"))
    )
    assert {m.WhichOneof("item") for m in alone_messages} == {"entry", "end"}
    _, alone = await _replay(alone_messages)
    assert [e.uuid for e in alone.entries] == uuids
    for budget, cap in ((64 * 1024, 64 * 1024), (MIB, MIB), (1 << 31, MIB)):
        messages = await _messages(
            history.stub.ReadWindow(
                pb.ReadWindowRequest(session_id="mixed", max_batch_bytes=budget)
            )
        )
        _, page = await _replay(messages)
        # The same entries, byte for byte, and the same end.
        assert [e.SerializeToString() for e in page.entries] == [
            e.SerializeToString() for e in alone.entries
        ]
        assert page.end == alone.end
        batches = [m for m in messages if m.WhichOneof("item") == "entries"]
        assert len(messages) < len(alone_messages) / 5, (budget, len(messages))
        for batch in batches:
            assert batch.ByteSize() <= cap + 16
            for entry in batch.entries.entries:
                assert len(entry.json.encode()) == entry.json_size_bytes
                assert len(entry.json) < 256 * 1024
        # The held-back large entries come alone, between the batches around them.
        alone_uuids = [m.entry.uuid for m in messages if m.WhichOneof("item") == "entry"]
        assert alone_uuids == ["u60", "u150"]


async def test_bootstrap_batches_its_window(history: HistoryHarness) -> None:
    uuids = _write_session(history)
    plain = await _messages(history.stub.Bootstrap(pb.BootstrapRequest(session_id="mixed")))
    batched = await _messages(
        history.stub.Bootstrap(pb.BootstrapRequest(session_id="mixed", max_batch_bytes=MIB))
    )
    assert batched[0].WhichOneof("item") == "header"
    headers, page = await _replay(batched)
    _, plain_page = await _replay(plain)
    assert [e.uuid for e in page.entries] == uuids
    assert [e.SerializeToString() for e in page.entries] == [
        e.SerializeToString() for e in plain_page.entries
    ]
    assert headers[0].watch_position
    assert len(batched) < len(plain) / 5
