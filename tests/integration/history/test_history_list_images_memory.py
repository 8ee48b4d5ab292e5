"""ListImages of a 2,000,000-line session over a real history server holds memory bounded.

The session is one conversation of small lines, each the child of the one
before (`write_chain_session`), with an image every 100,000 lines: the
numbering's chain is as long as the file. The server is a subprocess; its
tree's PSS is sampled while the stream runs and must stay within `GROWTH_MB`
of the same tree idle: the numbering keeps the chain's offsets, never a record
per line. The images' API paths are checked against the numbering rule worked
out for this shape (each image line is a user line between two others, so
three lines make one message).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.idle import tree_pss_kib
from scrollback_app.bench.list_images import list_images, peak_pss_during, write_chain_session
from tests.support.history import HarnessFactory
from tests.support.reasons import assert_reason

LINES = 2_000_000
IMAGE_EVERY = 100_000
GROWTH_MB = 150
MB = 1_000_000


@pytest.mark.slow
async def test_list_images_of_a_long_session_stays_within_its_memory_bound(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    write_chain_session(root / "project" / "long.jsonl", LINES, IMAGE_EVERY)
    write_chain_session(root / "project" / "warm.jsonl", 10_000, 1_000)
    async with (
        procs.history_server(root, tmp_path / "state") as server,
        services.channel(server.addr) as channel,
    ):
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        assert len(await list_images(stub, "warm")) == 11
        idle_kib = tree_pss_kib(server.pid)[0]
        messages, peak_kib = await peak_pss_during(server.pid, list_images(stub, "long"))
    images = [message.image for message in messages if message.HasField("image")]
    expected = [
        (IMAGE_EVERY * j, f"messages.{IMAGE_EVERY * j - 2 * j}.content.2")
        for j in range(1, LINES // IMAGE_EVERY + 1)
    ]
    assert [(image.line_number, image.api_path) for image in images] == expected
    growth = (peak_kib - idle_kib) * 1024 / MB
    assert growth < GROWTH_MB, f"ListImages grew the server by {growth:.0f} MB PSS"


async def test_a_chain_over_the_memory_budget_is_refused_with_its_reason(
    history_server: HarnessFactory,
) -> None:
    budget = 1024 * 1024  # the smallest setting: 43,690 chain entries
    async with history_server(images_memory_bytes=budget) as harness:
        write_chain_session(harness.transcript("long"), 50_000, 10_000)
        write_chain_session(harness.transcript("short"), 40_000, 10_000)
        listed = [
            m.image.api_path
            async for m in harness.stub.ListImages(hpb.ListImagesRequest(session_id="short"))
            if m.HasField("image")
        ]
        assert len(listed) == 4
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in harness.stub.ListImages(hpb.ListImagesRequest(session_id="long")):
                pass
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_reason(refused.value, Reason.CHAIN_TOO_LARGE)
    assert str(harness.root) not in (refused.value.details() or "")
