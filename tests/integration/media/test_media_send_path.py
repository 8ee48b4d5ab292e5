"""What sending one ReadMedia message costs the server's event loop.

The stall timeout (scrollback.server.interceptors) is one timer per stream:
a message costs no task of its own (before, each was sent through a task
and a timed wait). Counted with a task factory on the real server's loop:
the tasks a whole image's stream creates do not grow with its chunk count.
"""

from __future__ import annotations

import asyncio
from typing import Any

from scrollback.media.v1 import media_pb2
from tests.support.media import (
    MediaEnv,
    dumps,
    entry,
    image_block,
    mint,
    png_bytes,
    read_media,
    write_transcript,
)

CHUNKS = 64


async def _tasks_of_one_read(media: MediaEnv, selector: media_pb2.MediaSelector) -> int:
    loop = asyncio.get_running_loop()
    created = 0
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        _meta, _data, sizes = await read_media(media.stub, selector)
    finally:
        loop.set_task_factory(previous)
    assert len(sizes) == CHUNKS
    return created


async def test_a_streamed_message_costs_no_task(media: MediaEnv) -> None:
    payload = png_bytes(CHUNKS * media.config.chunk_size, seed=11)
    line = dumps(entry("u-send", [image_block(payload)]))
    write_transcript(media.root, "send", [line])
    (ref,) = mint("send", line)
    selector = media_pb2.MediaSelector(media_ref=ref)
    await read_media(media.stub, selector)  # warm: the line found, the image cached
    tasks = await _tasks_of_one_read(media, selector)
    # The call's own tasks (grpc's handler, the first message's timed write, the
    # thread hop's wrapper); one per message was 64 more.
    assert tasks < CHUNKS // 4, tasks
