"""A bounded load test on loopback: both services as child processes, N clients mixing calls.

`python -m scrollback_app.loadtest --seconds 60 --clients 8` writes a synthetic
corpus into a temp dir (transcripts with images), starts
`python -m history_service` and `python -m media_service` on 127.0.0.1:0, and
runs N client tasks that mix ReadWindow pages, ReadMedia of transcript images,
and AcceptMessage (every few with a WriteBlob attachment). It reports calls,
errors (any error is unexpected), p50/p99 latency per kind, and the servers'
peak RSS plus the peak of each half of the run (memory must stay flat).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SESSIONS = 4


@dataclass
class LoadReport:
    """What a load run measured."""

    seconds: float
    clients: int
    calls: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    p50_ms: dict[str, float] = field(default_factory=dict)
    p99_ms: dict[str, float] = field(default_factory=dict)
    peak_rss_kib: dict[str, int] = field(default_factory=dict)
    first_half_rss_kib: dict[str, int] = field(default_factory=dict)
    second_half_rss_kib: dict[str, int] = field(default_factory=dict)

    @property
    def total_errors(self) -> int:
        """Every error of every kind."""
        return sum(self.errors.values())

    def render(self) -> str:
        """A human-readable summary."""
        lines = [f"load: {self.clients} clients for {self.seconds:.1f} s"]
        for kind in sorted(self.calls):
            lines.append(
                f"  {kind:<8} calls={self.calls[kind]:>6} errors={self.errors.get(kind, 0):>3}"
                f" p50={self.p50_ms.get(kind, 0):7.2f} ms p99={self.p99_ms.get(kind, 0):7.2f} ms"
            )
        for name in sorted(self.peak_rss_kib):
            lines.append(
                f"  {name:<8} peak RSS {self.peak_rss_kib[name] / 1024:6.1f} MiB"
                f" (first half {self.first_half_rss_kib[name] / 1024:6.1f},"
                f" second half {self.second_half_rss_kib[name] / 1024:6.1f})"
            )
        lines.extend(f"  error: {sample}" for sample in self.error_samples[:5])
        return "\n".join(lines)


def _png(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return PNG_MAGIC + rng.randbytes(size - len(PNG_MAGIC))


def write_corpus(
    root: Path, *, lines_per_session: int = 400, images: int = 16
) -> dict[str, list[ref_pb2.MediaRef]]:
    """Transcripts with text and image lines; returns each session's image refs (pins included)."""
    from scrollback.contract.stripping import strip_line

    refs: dict[str, list[ref_pb2.MediaRef]] = {}
    folder = root / "load-proj"
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(SESSIONS):
        session = f"load-{number}"
        out: list[bytes] = []
        refs[session] = []
        for i in range(lines_per_session):
            uuid = f"{session}-e{i}"
            if i % max(1, lines_per_session // images) == 0:
                data = base64.b64encode(_png(60_000, number * 1000 + i)).decode()
                content: list[object] = [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": data},
                    }
                ]
            else:
                content = [{"type": "text", "text": f"line {i} " + "lorem ipsum " * 20}]
            entry = {"type": "user", "uuid": uuid, "message": {"role": "user", "content": content}}
            line = json.dumps(entry, separators=(",", ":")).encode()
            out.append(line)
            stripped = strip_line(line)
            if stripped is not None:
                for image in stripped.images:
                    refs[session].append(
                        ref_pb2.MediaRef(
                            session_id=session, entry_uuid=uuid, index=image.index, pin=image.pin
                        )
                    )
        (folder / f"{session}.jsonl").write_bytes(b"\n".join(out) + b"\n")
    return refs


class ChildServer:
    """One service as a child process on 127.0.0.1:0; stderr drained, port parsed."""

    def __init__(self, module: str, root: Path, state: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                "--transcripts",
                str(root),
                "--state",
                str(state),
                "--addr",
                "127.0.0.1:0",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.port = 0
        self._ready = threading.Event()
        self.tail: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._ready.wait(30) or not self.port:
            self.stop()
            raise RuntimeError(f"{module} did not start: {''.join(self.tail[-5:])}")

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            text = raw.decode(errors="replace")
            if not self.port:
                self.tail.append(text)
                match = re.search(r"listening on \S*:(\d+)", text)
                if match:
                    self.port = int(match.group(1))
                    self._ready.set()
        self._ready.set()

    def rss_kib(self) -> int:
        """The child's resident set size (Linux /proc)."""
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _drive(
    history_port: int,
    media_port: int,
    refs: dict[str, list[ref_pb2.MediaRef]],
    seconds: float,
    clients: int,
    report: LoadReport,
) -> None:
    latencies: dict[str, list[float]] = {}
    deadline = time.monotonic() + seconds

    async def client(number: int) -> None:
        rng = random.Random(number)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{history_port}") as history_channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{media_port}") as media_channel,
        ):
            history = history_pb2_grpc.HistoryServiceStub(history_channel)
            media = media_pb2_grpc.MediaServiceStub(media_channel)
            sequence = 0
            while time.monotonic() < deadline:
                pick = rng.random()
                session = f"load-{rng.randrange(SESSIONS)}"
                started = time.perf_counter()
                kind = "window" if pick < 0.5 else "media" if pick < 0.85 else "accept"
                try:
                    if kind == "window":
                        request = hpb.ReadWindowRequest(
                            session_id=session, page_size=rng.choice([20, 50, 200])
                        )
                        async for _ in history.ReadWindow(request, timeout=30):
                            pass
                    elif kind == "media":
                        ref = rng.choice(refs[session])
                        selector = mpb.MediaSelector(media_ref=ref)
                        async for _ in media.ReadMedia(
                            mpb.ReadMediaRequest(media=selector), timeout=30
                        ):
                            pass
                    else:
                        sequence += 1
                        attachments = []
                        if sequence % 4 == 0:
                            blob = _png(20_000 + rng.randrange(1000), number * 100_000 + sequence)
                            digest = hashlib.sha256(blob).hexdigest()

                            async def chunks(
                                data: bytes = blob, sha: str = digest
                            ) -> AsyncIterator[mpb.WriteBlobRequest]:
                                yield mpb.WriteBlobRequest(
                                    header=mpb.WriteBlobHeader(
                                        sha256=sha, size_bytes=len(data), media_type="image/png"
                                    )
                                )
                                yield mpb.WriteBlobRequest(data=data)

                            written = await media.WriteBlob(chunks(), timeout=30)
                            attachments.append(
                                hpb.Attachment(
                                    ref=written.ref, name="a.png", media_type="image/png"
                                )
                            )
                        await history.AcceptMessage(
                            hpb.AcceptMessageRequest(
                                client_txn_id=f"load-{number}-{sequence}-{os.getpid()}",
                                session_id=session,
                                text=f"message {sequence}",
                                attachments=attachments,
                            ),
                            timeout=30,
                        )
                except grpc.aio.AioRpcError as error:
                    report.errors[kind] = report.errors.get(kind, 0) + 1
                    if len(report.error_samples) < 20:
                        report.error_samples.append(
                            f"{kind}: {error.code().name} {error.details()}"
                        )
                    continue
                latencies.setdefault(kind, []).append(time.perf_counter() - started)
                report.calls[kind] = report.calls.get(kind, 0) + 1

    await asyncio.gather(*(client(n) for n in range(clients)))
    for kind, values in latencies.items():
        report.p50_ms[kind] = _percentile(values, 0.50) * 1000
        report.p99_ms[kind] = _percentile(values, 0.99) * 1000
    everything = [v for values in latencies.values() for v in values]
    report.p50_ms["all"] = _percentile(everything, 0.50) * 1000
    report.p99_ms["all"] = _percentile(everything, 0.99) * 1000
    report.calls["all"] = len(everything)


def run_load(seconds: float = 60.0, clients: int = 8, workdir: Path | None = None) -> LoadReport:
    """Run the whole load test and return its report."""
    with tempfile.TemporaryDirectory(prefix="scrollback-load-") as temp:
        base = workdir or Path(temp)
        root, state = base / "root", base / "state"
        root.mkdir(parents=True, exist_ok=True)
        state.mkdir(parents=True, exist_ok=True)
        refs = write_corpus(root)
        servers = {
            "history": ChildServer("history_service", root, state),
            "media": ChildServer("media_service", root, state),
        }
        report = LoadReport(seconds, clients)
        samples: dict[str, list[tuple[float, int]]] = {name: [] for name in servers}
        stop = threading.Event()
        began = time.monotonic()

        def sample() -> None:
            while not stop.wait(0.2):
                for name, server in servers.items():
                    samples[name].append((time.monotonic() - began, server.rss_kib()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            asyncio.run(
                _drive(
                    servers["history"].port, servers["media"].port, refs, seconds, clients, report
                )
            )
        finally:
            stop.set()
            sampler.join(2)
            for server in servers.values():
                server.stop()
        half = seconds / 2
        for name, points in samples.items():
            values = [rss for _, rss in points] or [0]
            report.peak_rss_kib[name] = max(values)
            report.first_half_rss_kib[name] = max([rss for at, rss in points if at < half] or [0])
            report.second_half_rss_kib[name] = max([rss for at, rss in points if at >= half] or [0])
        return report


def main(argv: list[str] | None = None) -> int:
    """Run from the command line; exit 1 on any error."""
    parser = argparse.ArgumentParser(prog="python -m scrollback_app.loadtest", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    report = run_load(args.seconds, args.clients)
    print(report.render())
    return 1 if report.total_errors else 0


if __name__ == "__main__":
    sys.exit(main())
