"""What each cache pays: the figure it exists for, with it and without it, in one run.

A cache stays only where it pays (docs/architecture.md lists the survivors).
Each figure starts two servers over the same transcripts, one with the cache
at its default size and one with it off (its setting at 0), and times the
same requests against both, interleaved:

- the entry cache (`SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES`): the latest window
  of the large file, read again;
- the decoded-image cache (`SCROLLBACK_MEDIA_DECODED_CACHE_BYTES`): a 1.3 MB
  transcript image read again, by one client and by `clients` at once;
- the media lookup cache (`SCROLLBACK_MEDIA_LINE_CACHE_ENTRIES`: per image, its
  line, where it was found and its metadata): the time to first byte of a
  hintless ref read before.

The ratio is the time without the cache over the time with it: 1.05x or more
is the keep rule's "pays".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path

import grpc

from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target

MB = 1_000_000
# The keep rule: a cache stays when its figure is at least this much better with it.
PAYS = 1.05


def _figure(key: str, name: str, medians: dict[str, float]) -> Figure:
    return Figure(
        key=key,
        name=name,
        figure=medians["off"] * 1e3,
        baseline=medians["on"] * 1e3,
        unit="ms",
        baseline_label="with the cache",
        ratio=medians["off"] / medians["on"],
        target=Target(">=", PAYS),
        note="ratio = time without the cache / time with it",
    )


def _hintless(ref: ref_pb2.MediaRef) -> ref_pb2.MediaRef:
    bare = ref_pb2.MediaRef()
    bare.CopyFrom(ref)
    bare.ClearField("line_offset_hint")
    return bare


async def measure(
    root: Path,
    work: Path,
    *,
    window_session: str,
    photos: list[ref_pb2.MediaRef],
    repeats: int,
    clients: int,
    throughput_seconds: float,
    throughput_rounds: int,
    log: Callable[[str], None],
) -> list[Figure]:
    """The three figures over the bench's transcripts under `root`."""
    figures: list[Figure] = []
    log("caches: each with and without, one server pair per cache")

    async def pair(
        start: Callable[[str, Mapping[str, str]], procs.ServerProcess], setting: str
    ) -> tuple[str, str, AsyncExitStack]:
        stack = AsyncExitStack()
        on = await stack.enter_async_context(start("on", {}))
        off = await stack.enter_async_context(start("off", {setting: "0"}))
        return on.addr, off.addr, stack

    def history(label: str, settings: Mapping[str, str]) -> procs.ServerProcess:
        return procs.history_server(root, work / f"state-cache-{label}", settings=settings)

    def media(label: str, settings: Mapping[str, str]) -> procs.ServerProcess:
        return procs.media_server(root, work / f"state-cache-media-{label}", settings=settings)

    on_addr, off_addr, stack = await pair(history, "SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES")
    async with stack, services.channel(on_addr) as on, services.channel(off_addr) as off:

        def window(channel: grpc.aio.Channel) -> services.TimedCase:
            stub = history_pb2_grpc.HistoryServiceStub(channel)

            async def case(_round: int) -> float | None:
                return await services.timed(
                    lambda: services.read_window(stub, window_session, page_size=200)
                )

            return case

        for case in (window(on), window(off)):
            await case(0)  # the first read fills the cache (and the page cache)
        medians = await services.interleave({"on": window(on), "off": window(off)}, repeats)
        figures.append(
            _figure(
                "cache_entries",
                "entry cache: the latest ReadWindow (200 entries) read again, without vs with",
                medians,
            )
        )

    on_addr, off_addr, stack = await pair(media, "SCROLLBACK_MEDIA_DECODED_CACHE_BYTES")
    async with stack, services.channel(on_addr) as on, services.channel(off_addr) as off:

        def read(channel: grpc.aio.Channel) -> services.TimedCase:
            stub = media_pb2_grpc.MediaServiceStub(channel)

            async def case(round_number: int) -> float | None:
                ref = photos[round_number % len(photos)]
                return await services.timed(lambda: services.drain_media(stub, ref))

            return case

        for number in range(len(photos)):
            for case in (read(on), read(off)):
                await case(number)
        medians = await services.interleave({"on": read(on), "off": read(off)}, repeats)
        figures.append(
            _figure(
                "cache_decoded",
                "decoded-image cache: a 1.3 MB transcript image read again, without vs with",
                medians,
            )
        )

        async def image_megabytes(each: grpc.aio.Channel, index: int) -> float:
            stub = media_pb2_grpc.MediaServiceStub(each)
            return await services.drain_media(stub, photos[index % len(photos)]) / MB

        def rate(addr: str) -> services.TimedCase:
            async def case(_round: int) -> float | None:
                return await services.throughput(addr, clients, throughput_seconds, image_megabytes)

            return case

        rates = await services.interleave(
            {"on": rate(on_addr), "off": rate(off_addr)}, throughput_rounds
        )
        figures.append(
            Figure(
                key="cache_decoded_throughput",
                name=f"decoded-image cache: {clients} concurrent clients reading 1.3 MB "
                "transcript images, with vs without",
                figure=rates["on"],
                baseline=rates["off"],
                unit="MB/s",
                baseline_label="without the cache",
                ratio=rates["on"] / rates["off"],
                target=Target(">=", PAYS),
                note="ratio = throughput with the cache / without it",
            )
        )

    on_addr, off_addr, stack = await pair(media, "SCROLLBACK_MEDIA_LINE_CACHE_ENTRIES")
    async with stack, services.channel(on_addr) as on, services.channel(off_addr) as off:
        bare = [_hintless(ref) for ref in photos]

        def first_byte(channel: grpc.aio.Channel) -> services.TimedCase:
            stub = media_pb2_grpc.MediaServiceStub(channel)

            async def case(round_number: int) -> float | None:
                return await services.media_ttfb(stub, bare[round_number % len(bare)])

            return case

        for number in range(len(bare)):
            for case in (first_byte(on), first_byte(off)):
                await case(number)
        medians = await services.interleave({"on": first_byte(on), "off": first_byte(off)}, repeats)
        figures.append(
            _figure(
                "cache_lookup",
                "media lookup caches: time to first byte of a hintless ref read before, "
                "without vs with",
                medians,
            )
        )
    return figures
