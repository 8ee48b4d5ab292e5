"""The media server process: periodic GC, `python -m media_service`, bind rules."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
from pathlib import Path

from scrollback.media.v1 import media_pb2
from tests.support.media import StartMedia

REPO = Path(__file__).resolve().parents[3]


async def test_periodic_gc_collects_unreferenced_blobs(start_media: StartMedia) -> None:
    env = await start_media(gc_interval_seconds=0.05, gc_grace_seconds=0.0)
    data = b"an unreferenced upload"
    sha = hashlib.sha256(data).hexdigest()
    header = media_pb2.WriteBlobHeader(sha256=sha, size_bytes=len(data))
    await env.stub.WriteBlob(
        iter([media_pb2.WriteBlobRequest(header=header), media_pb2.WriteBlobRequest(data=data)])
    )
    for _ in range(100):
        missing = await env.stub.FindMissingBlobs(media_pb2.FindMissingBlobsRequest(sha256=[sha]))
        if list(missing.missing_sha256) == [sha]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the periodic gc never collected the blob")


async def run_module(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "media_service",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_module_runs_until_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "SCROLLBACK_MEDIA_ADDR": "10.1.2.3:1"}
    (tmp_path / "t").mkdir()
    process = await run_module(
        "--transcripts", str(tmp_path / "t"), "--state", str(tmp_path / "s"),
        "--addr", "127.0.0.1:0", env=env,
    )  # fmt: skip
    assert process.stderr is not None
    line = b""
    while b"listening" not in line:
        line = await asyncio.wait_for(process.stderr.readline(), 20)
        assert line, "the server exited early"
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 20) == 0


async def test_module_refuses_public_bind_without_insecure(tmp_path: Path) -> None:
    process = await run_module(
        "--transcripts", str(tmp_path), "--state", str(tmp_path / "s"),
        "--addr", "0.0.0.0:0", env=dict(os.environ),
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 2
    assert b"refusing" in stderr and str(tmp_path).encode() not in stderr
