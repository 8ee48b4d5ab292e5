"""The latest window against the wire's own cost: a bare grpc.aio server sending its bytes.

One client reads the latest 200-entry window of the large transcript again
and again (a viewer opening a session, a service polling it), from the real
history service and from the floor server started with `--serialized-window`
(scrollback_app.bench.floor): the same `ReadWindowResponse` messages, captured
from the real server and serialized once at start, sent from memory with no
message built per call. Both serve from as many processes; the difference is
what the history service does per call beyond sending (its interceptors, the
checks before a replay, the rest of a read).
"""

from __future__ import annotations

from pathlib import Path

from scrollback.history.v1 import history_pb2_grpc
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target


async def measure(
    history_addr: str,
    image: Path,
    window: Path,
    *,
    workers: int,
    session_id: str,
    repeats: int,
    batch: int,
) -> Figure:
    """The `window_vs_wire` figure (the captured `window` holds the session's latest 200)."""
    async with (
        procs.ServerProcess(
            "scrollback_app.bench.floor",
            [
                "--image",
                str(image),
                "--window",
                str(window),
                "--workers",
                str(workers),
                "--serialized-window",
            ],
            name="wire floor server",
        ) as wire,
        services.channel(history_addr) as real_channel,
        services.channel(wire.addr) as wire_channel,
    ):
        stubs = {
            "real": history_pb2_grpc.HistoryServiceStub(real_channel),
            "wire": history_pb2_grpc.HistoryServiceStub(wire_channel),
        }
        for stub in stubs.values():  # connect; the real one keeps the window
            for _ in range(3):
                await services.read_window(stub, session_id)

        def case(stub: history_pb2_grpc.HistoryServiceAsyncStub) -> services.TimedCase:
            async def run(_round: int) -> float | None:
                return await services.timed(lambda: services.read_window(stub, session_id), batch)

            return run

        medians = await services.interleave(
            {name: case(stub) for name, stub in stubs.items()}, repeats
        )
    return Figure(
        key="window_vs_wire",
        name="latest ReadWindow (200 entries), read again by one client, vs a bare grpc.aio "
        "server sending the same serialized messages from memory",
        figure=medians["real"] * 1e3,
        baseline=medians["wire"] * 1e3,
        unit="ms",
        baseline_label="wire",
        ratio=medians["real"] / medians["wire"],
        target=Target("<=", 1.5),
    )
