"""A stalled bucket delays only the reads of that bucket, over a real SeaweedFS.

A media server whose transcripts are in a bucket (behind a proxy that can hold
every read) also serves blobs from its local state dir. With more transcript
reads stalled on the bucket than the server has default threads, a blob is
still read (and FindMissingBlobs still answers) at once: the bucket's reads run
on a bounded pool of their own (media_service.instance), not on the threads
that serve local files.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest

from client import MediaClient
from client._core import NO_RETRY, Upload
from media_service.instance import BUCKET_READ_THREADS
from scrollback.media.v1 import media_pb2
from tests.support.media import dumps, entry, image_block, mint, png_bytes
from tests.support.seaweed import BUCKET, Fault, FaultProxy, SeaweedServer
from tests.support.servers import ServerPair, user_line

# The default executor's size (asyncio's), which the stalled reads must outnumber.
DEFAULT_THREADS = min(32, (os.cpu_count() or 1) + 4)
# How long a local read may take while the bucket stalls (it takes milliseconds).
LOCAL_READ_SECONDS = 5.0


@pytest.fixture
def media_over_proxy(
    seaweed: SeaweedServer,
    fault_proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[tuple[ServerPair, list[Any]]]:
    for name, value in seaweed.env(fault_proxy.endpoint).items():
        monkeypatch.setenv(name, value)
    prefix = f"pool-{uuid.uuid4().hex[:8]}"
    line = dumps(entry("u-photo", [image_block(png_bytes(200_000, seed=4))]))
    obstore.put(seaweed.store(), f"{prefix}/proj/s1.jsonl", user_line("u0", "hi") + line + b"\n")
    # No block cache: every read of the transcript is a GET.
    pair = ServerPair(
        tmp_path / "unused",
        tmp_path / "state",
        transcripts=f"s3://{BUCKET}/{prefix}",
        bucket_cache_bytes=0,
    )
    calls: list[Any] = []
    try:
        pair.start_media(0)
        yield pair, calls
    finally:
        for call in calls:
            call.cancel()
        fault_proxy.set(Fault.NONE)  # releases the stalled reads
        pair.close()


def test_a_stalled_bucket_read_does_not_delay_a_local_blob(
    media_over_proxy: tuple[ServerPair, list[Any]], fault_proxy: FaultProxy
) -> None:
    pair, calls = media_over_proxy
    blob = png_bytes(300_000, seed=8)
    digest = hashlib.sha256(blob).hexdigest()
    (ref,) = mint("s1", dumps(entry("u-photo", [image_block(png_bytes(200_000, seed=4))])))
    with MediaClient(pair.media_addr, retry=NO_RETRY) as media:
        media.write_blob(Upload(blob, digest, "blob.png", "image/png"))
        (stat,) = media.stat_media([ref])  # the bucket's first listing, while it answers
        assert stat.metadata.size_bytes == 200_000
        fault_proxy.set(Fault.STALL)
        # Transcript reads (thumbnails: their checks read the line) that the bucket holds.
        stalled = DEFAULT_THREADS + 2
        request = media_pb2.ReadMediaRequest(
            media=media_pb2.MediaSelector(media_ref=ref), size=media_pb2.THUMBNAIL_SIZE_96
        )
        for _ in range(stalled):
            calls.append(media.stub.ReadMedia(request, timeout=120))
        held = min(DEFAULT_THREADS, BUCKET_READ_THREADS)
        deadline = time.monotonic() + 30
        while fault_proxy.faulted < held:
            assert time.monotonic() < deadline, "the transcript reads never reached the bucket"
            time.sleep(0.01)
        started = time.monotonic()
        read = media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(blob_ref=f"media:{digest}"))
        messages = list(media.stub.ReadMedia(read, timeout=LOCAL_READ_SECONDS))
        assert b"".join(m.data for m in messages if m.WhichOneof("item") == "data") == blob
        assert media.find_missing_blobs([digest]) == []
        assert time.monotonic() - started < LOCAL_READ_SECONDS
        assert fault_proxy.mode is Fault.STALL  # the bucket reads are still held
