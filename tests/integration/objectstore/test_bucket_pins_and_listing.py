"""A bucket's versions are pinned without ETags, and listing it costs its LIST pages only.

Over a real SeaweedFS behind the proxy of tests/support/seaweed.py: with the
proxy stripping every ETag (headers and listings) a read is pinned by the
object's size and Last-Modified, refused once the object changed, and never
answered from blocks of another version; the start-up check says the store
has no ETags. Listing sessions takes sizes, times and ETags from the LIST
answers: once titles and insight are known, a listing sends no HEAD and no
GET, and its answers are those of the same tree on a disk.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import obstore
import pytest

from client import HistoryClient
from client._core import NO_RETRY
from history_service.sessions import read_title
from scrollback.bucket import BucketRoot
from scrollback.objects import (
    Bucket,
    BucketLocation,
    ObjectChangedError,
)
from tests.support.seaweed import BUCKET, FaultProxy, SeaweedServer
from tests.support.servers import ServerPair, assistant_line, user_line

T = TypeVar("T")


@pytest.fixture
def etagless(
    seaweed: SeaweedServer, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> FaultProxy:
    """The proxy answering as a store without ETags, and this process's AWS variables on it."""
    fault_proxy.strip_etags = True
    for name, value in seaweed.env(fault_proxy.endpoint).items():
        monkeypatch.setenv(name, value)
    return fault_proxy


@pytest.fixture
def proxied(
    seaweed: SeaweedServer, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> FaultProxy:
    """The proxy passing everything (counting requests), this process's AWS variables on it."""
    for name, value in seaweed.env(fault_proxy.endpoint).items():
        monkeypatch.setenv(name, value)
    return fault_proxy


def _until(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _lines(head: bytes, tag: str, count: int) -> bytes:
    """`head`, then `count` entries of one shape whose ids carry `tag` (equal lengths per tag)."""
    return head + b"".join(
        assistant_line(f"{tag}-{n:04d}", f"answer {n:04d} " + "w" * 5000) for n in range(count)
    )


def test_without_etags_reads_are_pinned_by_size_and_time(
    seaweed: SeaweedServer, etagless: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"noetag-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/proj/s1.jsonl"
    head = user_line("u-head", "the same first prompt " + "h" * 5000)
    obstore.put(seaweed.store(), key, _lines(head, "old", 50))
    bucket = Bucket(BucketLocation(BUCKET, prefix), cache_bytes=0)
    with caplog.at_level(logging.WARNING, logger="scrollback.objects"):
        bucket.check()
    assert any("sends no ETags" in r.getMessage() for r in caplog.records)
    before = bucket.open(key)
    assert before.info.etag == ""
    assert before.read(10, 0) == head[:10]
    # Grown, with the same first bytes: the version an open source pins is gone.
    obstore.put(seaweed.store(), key, _lines(head, "old", 60))
    with pytest.raises(ObjectChangedError):
        before.read(10, 0)
    assert bucket.open(key).read(10, 0) == head[:10]


def test_without_etags_a_window_never_serves_a_replaced_version(
    seaweed: SeaweedServer, etagless: FaultProxy, tmp_path: Path
) -> None:
    prefix = f"noetagw-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/proj/s1.jsonl"
    head = user_line("u-head", "the same first prompt " + "h" * 5000)
    obstore.put(seaweed.store(), key, _lines(head, "old", 300))
    pair = ServerPair(
        tmp_path / "unused", tmp_path / "state", transcripts=f"s3://{BUCKET}/{prefix}"
    )
    try:
        pair.start_history(0)
        with HistoryClient(pair.history_addr, retry=NO_RETRY) as history:
            first = history.read_window("s1", page_size=200)
            assert {e.uuid[:4] for e in first.entries} == {"old-"}
            # Replaced by a grown object with the same first 4 KiB (so the same file version).
            obstore.put(seaweed.store(), key, _lines(head, "new", 400))
            latest = history.read_window("s1", page_size=200)
            assert [e.uuid for e in latest.entries] == [f"new-{n:04d}" for n in range(200, 400)]
            oldest = history.read_window("s1", page_size=200, oldest_first=True)
            assert {e.uuid[:4] for e in oldest.entries[1:]} == {"new-"}
    finally:
        pair.close()


def _sessions(history: HistoryClient) -> list[bytes]:
    listed = []
    for session in history.iter_sessions(page_size=7):
        copy = type(session)()
        copy.CopyFrom(session)
        copy.ClearField("modified_time")  # the upload's time, not the file's
        listed.append(bytes(copy.SerializeToString(deterministic=True)))
    return sorted(listed)


def test_listing_sessions_takes_what_the_list_answer_carries(
    seaweed: SeaweedServer, proxied: FaultProxy, tmp_path: Path
) -> None:
    prefix = f"lazy-{uuid.uuid4().hex[:8]}"
    store = seaweed.store()
    local = tmp_path / "root"
    files = {}
    for n in range(30):
        data = user_line(f"u{n}", f"title {n}") + assistant_line(f"a{n}", f"answer {n}")
        files[f"p{n % 3}/s{n}.jsonl"] = data
    files["p0/s1/subagents/agent-x1.jsonl"] = user_line("su1", "sub-agent task")
    for name, data in files.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)
        obstore.put(store, f"{prefix}/{name}", data)
    disk = ServerPair(local, tmp_path / "state-disk")
    pair = ServerPair(
        tmp_path / "unused", tmp_path / "state", transcripts=f"s3://{BUCKET}/{prefix}"
    )
    try:
        disk.start_history(0)
        pair.start_history(0)
        assert pair.history is not None
        bucket = pair.history.core.root.bucket  # type: ignore[attr-defined]
        with (
            HistoryClient(pair.history_addr) as history,
            HistoryClient(disk.history_addr) as on_disk,
        ):
            expected = _sessions(on_disk)
            assert len(expected) == 31
            assert _sessions(history) == expected
            # Objects are read for titles, insight and the indexer's pass, never HEADed.
            assert proxied.requests["HEAD"] == 0
            assert bucket.gets <= 2 * len(files)

            def requests() -> tuple[int, int, int]:
                return bucket.heads, bucket.gets, proxied.requests["GET"]

            def unchanged(seen: tuple[int, int, int]) -> bool:
                time.sleep(0.5)
                return requests()[:2] == seen[:2]

            settled = _until(requests, unchanged)
            assert _sessions(history) == expected
            # Listing again: LIST pages only (no HEAD, no ranged GET).
            assert (bucket.heads, bucket.gets) == settled[:2]
            assert proxied.requests["HEAD"] == 0
            # A grown object: its new title and insight are read from its new version.
            grown = files["p1/s4.jsonl"] + user_line("u4b", "more")
            obstore.put(store, f"{prefix}/p1/s4.jsonl", grown)
            (local / "p1/s4.jsonl").write_bytes(grown)
            expected = _sessions(on_disk)
            assert _until(lambda: _sessions(history), lambda seen: seen == expected) == expected
            assert proxied.requests["HEAD"] == 0
    finally:
        pair.close()
        disk.close()


def test_a_version_replaced_since_the_listing_is_read_anew(
    seaweed: SeaweedServer, proxied: FaultProxy
) -> None:
    prefix = f"relist-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/proj/s1.jsonl"
    obstore.put(seaweed.store(), key, user_line("u1", "the first title"))
    root = BucketRoot(Bucket(BucketLocation(BUCKET, prefix), cache_bytes=0), rescan_interval=60)
    (transcript,) = root.list(None)
    heads = proxied.requests["HEAD"]
    assert root.read_listed(transcript, lambda s: read_title(s, s.stat().st_size)) == (
        "the first title"
    )
    assert proxied.requests["HEAD"] == heads  # the listing named the version
    obstore.put(seaweed.store(), key, user_line("u1", "another title, longer than the first"))
    with root.open_listed(transcript) as stale, pytest.raises(ObjectChangedError):
        stale.read(10, 0)
    assert root.read_listed(transcript, lambda s: read_title(s, s.stat().st_size)) == (
        "another title, longer than the first"
    )
    assert proxied.requests["HEAD"] == heads + 1  # the version there now, once
