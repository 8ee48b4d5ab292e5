"""Gateway figures: a photo over HTTP through the gateway vs straight ReadMedia, and its peak RSS.

The gateway runs as `python -m gateway` (a subprocess, RSS from VmHWM) in
front of the run's media and history servers. Photo URLs come from the
gateway's own window JSON, as a browser gets them. `python -m
scrollback_app.bench.gateway` measures them alone, over servers of its own.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import httpx

from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.procs import free_port, proc_status_kib
from scrollback_app.bench.transcripts import write_transcript

MB = 1_000_000


def _spawn(
    args: list[str], log: IO[bytes], settings: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")}
    env.update(settings or {})
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


@asynccontextmanager
async def gateway_process(
    history_addr: str, media_addr: str, downloads: int = 0
) -> AsyncIterator[tuple[str, int]]:
    """`python -m gateway` on a free port; yields its base URL and pid.

    `downloads`: the downloads of one photo, and from this one client, the
    gateway lets be open at once (0: its defaults), since the bench fetches
    few photos many times at once.
    """
    port = free_port()
    settings = {}
    if downloads:
        settings = {
            "SCROLLBACK_GATEWAY_MAX_DOWNLOADS_PER_URL": str(downloads),
            "SCROLLBACK_GATEWAY_MAX_DOWNLOADS_PER_CLIENT": str(downloads),
        }
    with tempfile.TemporaryFile() as log:
        process = _spawn(
            [
                *("--addr", f"127.0.0.1:{port}"),
                *("--history-addr", history_addr, "--media-addr", media_addr),
            ],
            log,
            settings,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            async with httpx.AsyncClient() as client:
                while True:
                    if process.poll() is not None:
                        log.seek(0)
                        raise RuntimeError(f"gateway exited at start:\n{log.read()[-2000:]!r}")
                    try:
                        if (await client.get(url + "/", timeout=1)).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError("the gateway did not start")
                    await asyncio.sleep(0.05)
            yield url, process.pid
        finally:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait, 10)


async def photo_urls(client: httpx.AsyncClient, url: str, session_id: str) -> list[str]:
    """The signed photo URLs of a session's latest window."""
    answer = await client.get(f"{url}/api/v1/sessions/{session_id}/window?page_size=200")
    answer.raise_for_status()
    return [url + ref["url"] for e in answer.json()["entries"] for ref in e["mediaRefs"]]


async def drain_http(client: httpx.AsyncClient, url: str) -> int:
    """GET a photo and count its bytes as they stream."""
    total = 0
    async with client.stream("GET", url) as response:
        response.raise_for_status()
        async for chunk in response.aiter_raw():
            total += len(chunk)
    return total


class LeanClient:
    """One keep-alive HTTP/1.1 connection of the standard library's http.client, as a browser
    keeps one per origin: a photo costs the client little beside the bytes it reads."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self._connection = http.client.HTTPConnection(parts.hostname or "", parts.port)
        self._buffer = memoryview(bytearray(256 * 1024))

    def get(self, url: str) -> int:
        """GET a URL of this origin and count its body's bytes (blocking)."""
        parts = urlsplit(url)
        self._connection.request("GET", f"{parts.path}?{parts.query}")
        response = self._connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"photo GET answered {response.status}")
        total = 0
        while read := response.readinto(self._buffer):
            total += read
        return total

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


async def lean_figures(
    url: str,
    urls: list[str],
    media: media_pb2_grpc.MediaServiceAsyncStub,
    photos: list[ref_pb2.MediaRef],
    *,
    size: int,
    repeats: int,
    batch: int,
    clients: int,
) -> list[Figure]:
    """A photo by its signed URL through http.client keep-alive connections (one per client,
    each on a thread of its own) vs straight ReadMedia: one client, and `clients` at once."""
    lean = [LeanClient(url) for _ in range(clients)]
    pool = ThreadPoolExecutor(max_workers=clients, thread_name_prefix="lean-client")
    loop = asyncio.get_running_loop()
    try:
        for index, each in enumerate(lean):  # connect, untimed
            await loop.run_in_executor(pool, each.get, urls[index % len(urls)])

        def one(index: int, round_number: int) -> Callable[[], Awaitable[int]]:
            return lambda: loop.run_in_executor(
                pool, lean[index].get, urls[(round_number + index) % len(urls)]
            )

        async def lean_one(round_number: int) -> float:
            return await services.timed(one(0, round_number), batch)

        async def straight_one(round_number: int) -> float:
            ref = photos[round_number % len(photos)]
            return await services.timed(lambda: services.drain_media(media, ref), batch)

        async def lean_many(round_number: int) -> float:
            start = time.perf_counter()
            await asyncio.gather(*(one(i, round_number)() for i in range(clients)))
            return time.perf_counter() - start

        async def straight_many(_round: int) -> float:
            start = time.perf_counter()
            await asyncio.gather(
                *(services.drain_media(media, photos[i % len(photos)]) for i in range(clients))
            )
            return time.perf_counter() - start

        medians = await services.interleave(
            {
                "lean": lean_one,
                "straight": straight_one,
                "lean_many": lean_many,
                "straight_many": straight_many,
            },
            repeats,
        )
    finally:
        for each in lean:
            each.close()
        pool.shutdown()
    return [
        Figure(
            key="gateway_photo_lean",
            name=f"a {size / MB:.1f} MB photo by its signed URL through the gateway, http.client "
            "keep-alive, vs straight ReadMedia, one client",
            figure=medians["lean"] * 1e3,
            baseline=medians["straight"] * 1e3,
            unit="ms",
            baseline_label="ReadMedia",
            ratio=medians["lean"] / medians["straight"],
            target=Target("<=", 1.15),
        ),
        Figure(
            key="gateway_photo_lean_concurrent",
            name=f"{clients} concurrent {size / MB:.1f} MB photos by signed URL through the "
            "gateway, http.client keep-alive (one connection each), vs straight ReadMedia "
            "(wall time)",
            figure=medians["lean_many"] * 1e3,
            baseline=medians["straight_many"] * 1e3,
            unit="ms",
            baseline_label="ReadMedia",
            ratio=medians["lean_many"] / medians["straight_many"],
            target=Target("<=", 1.15),
        ),
    ]


async def gateway_figures(
    history_addr: str,
    media_addr: str,
    media: media_pb2_grpc.MediaServiceAsyncStub,
    photos: list[ref_pb2.MediaRef],
    *,
    repeats: int,
    batch: int,
    clients: int,
    rss_streams: int,
    big_session: str,
    photo_session: str,
) -> list[Figure]:
    """The gateway figures."""
    figures: list[Figure] = []
    limits = httpx.Limits(max_connections=rss_streams * 2)
    # Every download the bench opens at once may be of one photo, from this one client.
    downloads = max(clients, rss_streams)
    async with (
        gateway_process(history_addr, media_addr, downloads) as (url, _pid),
        httpx.AsyncClient(limits=limits, timeout=60) as client,
    ):
        urls = await photo_urls(client, url, photo_session)
        size = await drain_http(client, urls[0])

        async def through_gateway(round_number: int) -> float:
            target = urls[round_number % len(urls)]
            return await services.timed(lambda: drain_http(client, target), batch)

        async def straight(round_number: int) -> float:
            ref = photos[round_number % len(photos)]
            return await services.timed(lambda: services.drain_media(media, ref), batch)

        medians = await services.interleave(
            {"gateway": through_gateway, "straight": straight}, repeats
        )
        figures.append(
            Figure(
                key="gateway_photo_vs_readmedia",
                name=f"a {size / MB:.1f} MB photo over HTTP through the gateway vs straight "
                "ReadMedia, one client",
                figure=medians["gateway"] * 1e3,
                baseline=medians["straight"] * 1e3,
                unit="ms",
                baseline_label="ReadMedia",
                ratio=medians["gateway"] / medians["straight"],
                target=Target("<=", 1.3),
            )
        )

        async def concurrent(fetch_one: object) -> float:
            start = time.perf_counter()
            await asyncio.gather(*(fetch_one(i) for i in range(clients)))  # type: ignore[operator]
            return time.perf_counter() - start

        async def gateway_many(_round: int) -> float:
            return await concurrent(lambda i: drain_http(client, urls[i % len(urls)]))

        async def straight_many(_round: int) -> float:
            return await concurrent(lambda i: services.drain_media(media, photos[i % len(photos)]))

        medians = await services.interleave(
            {"gateway": gateway_many, "straight": straight_many}, repeats
        )
        figures.append(
            Figure(
                key="gateway_photo_concurrent",
                name=f"{clients} concurrent {size / MB:.1f} MB photos through the gateway vs "
                "straight ReadMedia (wall time)",
                figure=medians["gateway"] * 1e3,
                baseline=medians["straight"] * 1e3,
                unit="ms",
                baseline_label="ReadMedia",
                ratio=medians["gateway"] / medians["straight"],
                target=Target("<=", 1.3),
            )
        )
        figures += await lean_figures(
            url,
            urls,
            media,
            photos,
            size=size,
            repeats=repeats,
            batch=batch,
            clients=clients,
        )

    peaks: dict[str, float] = {}
    for session_id in (photo_session, big_session):
        async with (
            gateway_process(history_addr, media_addr, downloads) as (url, pid),
            httpx.AsyncClient(limits=limits, timeout=120) as client,
        ):
            urls = await photo_urls(client, url, session_id)
            await asyncio.gather(
                *(drain_http(client, urls[i % len(urls)]) for i in range(rss_streams))
            )
            peaks[session_id] = proc_status_kib(pid, "VmHWM") * 1024 / MB
    figures.append(
        Figure(
            key="gateway_rss_big_vs_small_photos",
            name=f"gateway peak RSS (VmHWM), {rss_streams} concurrent photo downloads, "
            "~7.5 MB vs ~1.3 MB photos",
            figure=peaks[big_session],
            baseline=peaks[photo_session],
            unit="MB",
            baseline_label="1.3 MB photos",
            ratio=peaks[big_session] / peaks[photo_session],
            target=Target("<=", 1.2, figure_max=200),
        )
    )
    return figures


async def measure_alone(
    work: Path,
    log: Callable[[str], None],
    *,
    big_bytes: int,
    repeats: int,
    batch: int,
    clients: int,
    rss_streams: int,
) -> list[Figure]:
    """These figures over fresh servers: a 4 MB session of 1.3 MB photos, one of 7.5 MB photos."""
    root = work / "root"
    plan = {"photo": (4 * MB, 1_300_000), "bigimg": (big_bytes, 7_500_000)}
    for session_id, (size, image) in plan.items():
        write_transcript(
            root / "bench" / f"{session_id}.jsonl",
            size,
            image_bytes=image,
            session_id=session_id,  # type: ignore[arg-type]
        )
    log(f"transcripts written under {root}")
    async with (
        procs.history_server(root, work / "state-history") as history_server,
        procs.media_server(root, work / "state-media") as media_server,
        services.channel(history_server.addr) as history_channel,
        services.channel(media_server.addr) as media_channel,
    ):
        history = history_pb2_grpc.HistoryServiceStub(history_channel)
        media = media_pb2_grpc.MediaServiceStub(media_channel)
        photos = (await services.read_window(history, "photo")).refs
        await services.read_window(history, "bigimg")
        for ref in photos:  # the full run reads them before too (the media figures)
            await services.drain_media(media, ref)
        log(f"{len(photos)} photos; measuring")
        return await gateway_figures(
            history_server.addr,
            media_server.addr,
            media,
            photos,
            repeats=repeats,
            batch=batch,
            clients=clients,
            rss_streams=rss_streams,
            big_session="bigimg",
            photo_session="photo",
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m scrollback_app.bench.gateway [--repeats N] [--big-mb N]`: these figures alone."""
    import argparse

    from scrollback_app.bench.figures import run_alone

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats (15)")
    parser.add_argument("--batch", type=int, default=5, help="photos per one-client sample (5)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent photos (16)")
    parser.add_argument("--rss-streams", type=int, default=32, help="downloads for RSS (32)")
    parser.add_argument("--big-mb", type=float, default=250.0, help="7.5 MB-photo session, MB")
    args = parser.parse_args(argv)
    return run_alone(
        "scrollback gateway bench",
        lambda work, log: measure_alone(
            work,
            log,
            big_bytes=int(args.big_mb * MB),
            repeats=args.repeats,
            batch=args.batch,
            clients=args.clients,
            rss_streams=args.rss_streams,
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
