"""Session lookup figures: unknown ids cost what hidden ones cost, and slow no one else.

On a root of many small transcripts (5,000 by default) and a history server
with two principals, measures:

- NOT_FOUND latency of ReadWindow for a session id that exists nowhere vs one
  that exists in a project the caller may not see (target about 1x: neither
  timing nor load tells them apart);
- another caller's median ReadWindow latency of its own session while a flood
  of unknown ids runs, vs the same without the flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from scrollback.history.v1 import history_pb2, history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target

PROJECTS = 50
PROBE_PAUSE_SECONDS = 0.06
TOKENS = {"alice": "bench-alice-token", "bob": "bench-bob-token"}


def write_root(root: Path, transcripts: int) -> None:
    """`transcripts` one-line sessions over PROJECTS project dirs; alice's own is `mine`."""
    line = b'{"type":"user","uuid":"u0","message":{"role":"user","content":"hi"}}\n'
    for number in range(transcripts):
        project = root / f"proj-{number % PROJECTS}"
        project.mkdir(parents=True, exist_ok=True)
        (project / f"s-{number}.jsonl").write_bytes(line)
    (root / "alice").mkdir(parents=True, exist_ok=True)
    (root / "alice" / "mine.jsonl").write_bytes(line * 20)


def write_tokens(path: Path) -> Path:
    """alice sees only her project; bob sees every `proj-*` one (not that alice knows)."""
    entries = [
        {"token": TOKENS["alice"], "principal": "alice", "projects": ["alice"]},
        {
            "token": TOKENS["bob"],
            "principal": "bob",
            "projects": [f"proj-{n}" for n in range(PROJECTS)],
        },
    ]
    path.write_text(json.dumps({"tokens": entries}))
    return path


async def _window(stub: history_pb2_grpc.HistoryServiceAsyncStub, session_id: str) -> bool:
    """One latest window as alice; True if found."""
    request = history_pb2.ReadWindowRequest(session_id=session_id, page_size=20)
    metadata = (("authorization", f"Bearer {TOKENS['alice']}"),)
    try:
        async for _ in stub.ReadWindow(request, metadata=metadata):
            pass
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        return False
    return True


async def measure(
    work: Path, transcripts: int, samples: int, flood_clients: int, log: Callable[[str], None]
) -> list[Figure]:
    """Both figures, on a root of `transcripts` sessions under `work`."""
    root = work / "lookup-root"
    write_root(root, transcripts)
    tokens = write_tokens(work / "lookup-tokens.json")
    log(f"lookup: {transcripts} transcripts in {PROJECTS} project dirs")
    server = procs.history_server(root, work / "state-lookup", auth_tokens=tokens)
    async with server, services.channel(server.addr) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        assert await _window(stub, "mine"), "alice's own session must be found"
        counter = iter(range(1 << 62))

        def case(session_id: Callable[[], str]) -> services.TimedCase:
            async def run(_round: int) -> float | None:
                # A prober paced like a careful attacker: the index is never
                # "just refreshed" when the question arrives.
                await asyncio.sleep(PROBE_PAUSE_SECONDS)
                start = time.perf_counter()
                found = await _window(stub, session_id())
                assert not found
                return time.perf_counter() - start

            return run

        medians = await services.interleave(
            {
                "nonexistent": case(lambda: f"nope-{next(counter)}"),
                "hidden": case(lambda: f"s-{next(counter) % transcripts}"),
            },
            samples,
        )
        figures = [
            Figure(
                key="lookup_nonexistent_vs_hidden",
                name=f"ReadWindow NOT_FOUND, nonexistent vs another principal's session id, "
                f"{transcripts} transcripts",
                figure=medians["nonexistent"] * 1e3,
                baseline=medians["hidden"] * 1e3,
                unit="ms",
                baseline_label="hidden id",
                ratio=medians["nonexistent"] / medians["hidden"],
                target=Target("<=", 1.25),
                note="target about 1x: the answer's timing does not tell them apart",
            )
        ]
        figures.append(await _flood(server.addr, stub, samples, flood_clients))
    return figures


async def _flood(
    addr: str,
    stub: history_pb2_grpc.HistoryServiceAsyncStub,
    samples: int,
    clients: int,
) -> Figure:
    ids = iter(range(1 << 62))
    flooding = asyncio.Event()

    async def flood(each: grpc.aio.Channel) -> None:
        flooder = history_pb2_grpc.HistoryServiceStub(each)
        while True:
            await flooding.wait()
            await _window(flooder, f"flood-{next(ids)}")

    async def own(_round: int) -> float | None:
        return await services.timed(lambda: _window(stub, "mine"))

    channels = [services.channel(addr) for _ in range(clients)]
    tasks = [asyncio.create_task(flood(each)) for each in channels]
    try:
        quiet: list[float] = []
        loud: list[float] = []
        for round_number in range(samples):
            # alternate blocks with and without the flood, so drift hits both
            for loud_now in (round_number % 2 == 0, round_number % 2 == 1):
                if loud_now:
                    flooding.set()
                    await asyncio.sleep(0.02)  # let the flood reach the server
                else:
                    flooding.clear()
                    await asyncio.sleep(0.02)
                sample = await own(round_number)
                (loud if loud_now else quiet).append(sample or 0.0)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await task
        await asyncio.gather(*(each.close(None) for each in channels))
    during, without = services.median(loud), services.median(quiet)
    return Figure(
        key="lookup_flood_others",
        name=f"another caller's ReadWindow of its own session during a flood of unknown "
        f"ids ({clients} flooding clients) vs without it",
        figure=during * 1e3,
        baseline=without * 1e3,
        unit="ms",
        baseline_label="no flood",
        ratio=during / without,
        target=Target("<=", 3.0),
        note="the flood's own requests still cost CPU; no root rescan per miss",
    )
