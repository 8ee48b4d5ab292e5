"""Client-side measurements of the real servers and of their baselines.

- `naive_latest`: the baseline reader a service-less client would write (read
  the whole file, `json.loads` every line, keep the last 200).
- `read_window`, `read_media`, `media_ttfb`: one call each, timed by callers.
- `interleave`: run several timed cases in turn, repeat, and keep the medians,
  so every figure and its baseline see the same machine state.
- `beside_health_check`: calls each followed by a gRPC health check, the latency floor.
- `throughput`: N concurrent clients looping on one call for a fixed time.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback.media.v1 import media_pb2, media_pb2_grpc
from scrollback.ref.v1 import ref_pb2

LATEST = history_pb2.READ_DIRECTION_LATEST_FIRST
OLDEST = history_pb2.READ_DIRECTION_OLDEST_FIRST
# The max_batch_bytes windows are read with, as the client library asks them.
BATCH_BYTES = 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.use_local_subchannel_pool", 1),  # one connection per channel
]


def channel(addr: str) -> grpc.aio.Channel:
    """A plaintext channel of its own (not shared with other channels)."""
    return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)


def naive_latest(path: Path, count: int = 200) -> list[Any]:
    """The baseline: read the file, json.loads every line, keep the last `count`."""
    last: deque[Any] = deque(maxlen=count)
    with open(path, "rb") as handle:
        for line in handle:
            try:
                last.append(json.loads(line))
            except ValueError:
                continue
    return list(last)


class WindowResult:
    """What one ReadWindow stream brought."""

    __slots__ = ("entries", "messages", "next_token", "refs")

    def __init__(self) -> None:
        self.entries = 0
        self.refs: list[ref_pb2.MediaRef] = []
        self.next_token = ""
        self.messages: list[bytes] = []


async def read_window(
    stub: history_pb2_grpc.HistoryServiceAsyncStub,
    session_id: str,
    *,
    page_size: int = 200,
    page_token: str = "",
    direction: int = LATEST,
    keep_messages: bool = False,
    max_batch_bytes: int = BATCH_BYTES,
    inline_limit_bytes: int = 0,
) -> WindowResult:
    """Read one window to its end (batched as the client library asks, unless told; 0: the
    server's default inline limit)."""
    result = WindowResult()
    request = history_pb2.ReadWindowRequest(
        session_id=session_id,
        page_size=page_size,
        page_token=page_token,
        direction=direction,  # type: ignore[arg-type]
        max_batch_bytes=max_batch_bytes,
        inline_limit_bytes=inline_limit_bytes,
    )
    async for message in stub.ReadWindow(request):
        if keep_messages:
            result.messages.append(message.SerializeToString())
        item = message.WhichOneof("item")
        if item == "entry":
            result.entries += 1
            result.refs.extend(message.entry.media_refs)
        elif item == "entries":
            result.entries += len(message.entries.entries)
            for entry in message.entries.entries:
                result.refs.extend(entry.media_refs)
        elif item == "end":
            result.next_token = message.end.next_page_token
    return result


def media_request(ref: ref_pb2.MediaRef) -> media_pb2.ReadMediaRequest:
    """A ReadMedia request for a whole transcript image."""
    return media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(media_ref=ref))


async def read_media(
    stub: media_pb2_grpc.MediaServiceAsyncStub, ref: ref_pb2.MediaRef
) -> tuple[media_pb2.MediaMetadata, bytes]:
    """The whole image: its metadata and bytes."""
    metadata = media_pb2.MediaMetadata()
    parts: list[bytes] = []
    async for message in stub.ReadMedia(media_request(ref)):
        if message.WhichOneof("item") == "metadata":
            metadata = message.metadata
        else:
            parts.append(message.data)
    return metadata, b"".join(parts)


async def drain_media(stub: media_pb2_grpc.MediaServiceAsyncStub, ref: ref_pb2.MediaRef) -> int:
    """Read a whole image, keeping nothing; return its byte count."""
    received = 0
    async for message in stub.ReadMedia(media_request(ref)):
        received += len(message.data)
    return received


async def media_ttfb(stub: media_pb2_grpc.MediaServiceAsyncStub, ref: ref_pb2.MediaRef) -> float:
    """Seconds from the call to its first message (the stream is then drained)."""
    start = time.perf_counter()
    first: float | None = None
    async for _message in stub.ReadMedia(media_request(ref)):
        if first is None:
            first = time.perf_counter() - start
    if first is None:
        raise RuntimeError("ReadMedia sent nothing")
    return first


TimedCase = Callable[[int], Awaitable[float | None]]


async def timed(call: Callable[[], Awaitable[object]], batch: int = 1) -> float:
    """Seconds per call, over `batch` sequential calls."""
    start = time.perf_counter()
    for _ in range(batch):
        await call()
    return (time.perf_counter() - start) / batch


async def interleave(cases: dict[str, TimedCase], repeats: int) -> dict[str, float]:
    """Run each case once per round, rounds `repeats` times, order alternating.

    A case gets the round number and returns the seconds it measured (or None
    to sit this round out); the result is each case's median.
    """
    samples: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for round_number in range(repeats):
        order = names if round_number % 2 == 0 else names[::-1]
        for name in order:
            sample = await cases[name](round_number)
            if sample is not None:
                samples[name].append(sample)
    return {name: statistics.median(values) for name, values in samples.items()}


async def beside_health_check(
    channel: grpc.aio.Channel, samples: int, call: Callable[[int], Awaitable[object]]
) -> tuple[list[float], list[float]]:
    """Milliseconds of `samples` calls `call(number)`, each followed by a gRPC health
    check on the same channel (the floor): the calls' and the checks' times."""
    health = health_pb2_grpc.HealthStub(channel)
    calls: list[float] = []
    floor: list[float] = []
    for number in range(samples):
        started = time.perf_counter()
        await call(number)
        calls.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await health.Check(health_pb2.HealthCheckRequest())
        floor.append((time.perf_counter() - started) * 1000)
    return calls, floor


async def throughput(
    addr: str,
    clients: int,
    seconds: float,
    work: Callable[[grpc.aio.Channel, int], Awaitable[float]],
) -> float:
    """Units of work per second of `clients` concurrent clients, each on its own channel.

    `work(channel, client_index)` does one unit and returns how many units it
    was (1 for a window, the megabytes for an image).
    """
    channels = [channel(addr) for _ in range(clients)]
    try:
        for index, each in enumerate(channels):  # connect and warm up, untimed
            await work(each, index)
        deadline = time.perf_counter() + seconds
        start = time.perf_counter()

        async def loop(each: grpc.aio.Channel, index: int) -> float:
            done = 0.0
            while time.perf_counter() < deadline:
                done += await work(each, index)
            return done

        totals = await asyncio.gather(*(loop(each, i) for i, each in enumerate(channels)))
        return sum(totals) / (time.perf_counter() - start)
    finally:
        await asyncio.gather(*(each.close(None) for each in channels))


def median(values: Sequence[float]) -> float:
    """The median (a name to import beside the rest)."""
    return statistics.median(values)
