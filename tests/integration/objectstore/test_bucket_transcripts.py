"""Transcripts in a bucket serve exactly as the same files on a disk, over real servers.

Two server pairs run side by side: one over a local root, one over the same
tree uploaded to a real SeaweedFS (`SCROLLBACK_TRANSCRIPTS=s3://...`). Every
session's listing, windows in both directions (page by page, through page
tokens), refs, photo bytes, StatMedia, search hits and insight must agree.
Then what only objects do: a rewrite refuses old page tokens, a grown object
keeps its version and serves its new tail, a store that fails or truncates
gives UNAVAILABLE (TRANSCRIPTS_UNAVAILABLE), and a bucket that is missing or
refuses the credentials stops the service at start with exit status 2.
"""

from __future__ import annotations

import base64
import csv
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import obstore
import pytest

from client import HistoryClient, MediaClient
from client._core import NO_RETRY
from client.errors import PinMismatch, TranscriptRewritten, TranscriptsUnavailable
from scrollback.bucket import MIN_LIST_SECONDS, BucketRoot
from scrollback.contract.reasons import Reason
from scrollback.linefile import FileVersion
from scrollback.objects import (
    BLOCK_BYTES,
    Bucket,
    BucketConfigError,
    BucketLocation,
    ObjectChangedError,
    TranscriptsUnavailableError,
)
from scrollback.transcripts import SessionNotFoundError
from tests.support.codex import CWD, full_rollout, write_rollout
from tests.support.media import dumps, entry, mint, png_bytes
from tests.support.media import image_block as media_image_block
from tests.support.seaweed import BUCKET, Fault, FaultProxy, SeaweedServer
from tests.support.servers import ServerPair, assistant_line, png, user_line

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
T = TypeVar("T")


def _adversarial_tree(root: Path) -> None:
    """Sessions, sub-agents and the awkward lines: blank, not JSON, CRLF, a line over one
    cache block, photos, an unterminated last line, and a file name that is no id."""
    a = root / "proj-a"
    (a / "s-main" / "subagents").mkdir(parents=True)
    (a / "s-main.jsonl").write_bytes(
        user_line("u1", "first prompt about zebras", timestamp="2026-01-01T00:00:00Z")
        + assistant_line("a1", "an answer about zebras")
        + user_line("u2", "two photos", images=(png(1), png(2, 60)))
        + b"\n\n"
        + b"not json at all\n"
        + assistant_line("a2", "after the noise").replace(b"\n", b"\r\n")
        + user_line("u3", "a long one " + "x" * (BLOCK_BYTES * 2 + 12345))
        + assistant_line("a3", "the last word, unterminated").rstrip(b"\n")
    )
    (a / "s-main" / "subagents" / "agent-x1.jsonl").write_bytes(
        user_line("su1", "sub-agent task about zebras") + assistant_line("sa1", "done")
    )
    (a / "agent-legacy.jsonl").write_bytes(assistant_line("la1", "legacy sub-agent"))
    (a / "not an id!.jsonl").write_bytes(assistant_line("n1", "skipped"))
    b = root / "proj-b"
    b.mkdir()
    (b / "s-other.jsonl").write_bytes(
        user_line("ob1", "other project prompt", images=(png(3),)) + assistant_line("ob2", "ok")
    )


def _corpus_tree(root: Path) -> None:
    """The real transcripts of tests/corpus, one session each under its owner's project."""
    with (CORPUS / "MANIFEST.tsv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t")]
    for number, row in enumerate(r for r in rows if not r["file"].endswith(".meta.json")):
        project = root / row["file"].split("/")[0]
        project.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / row["file"], project / f"c{number}.jsonl")


def _until(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _plain_slim(message: Any) -> bytes:
    """A slim copy's message without its original file's mode and time (a file's on disk, an
    object's Last-Modified and no mode in a bucket)."""
    copy = type(message)()
    copy.CopyFrom(message)
    if copy.HasField("file"):
        copy.file.ClearField("source_mode")
        copy.file.ClearField("source_modified_time")
    return bytes(copy.SerializeToString(deterministic=True))


def _plain(message: Any) -> bytes:
    """A message with its refs' pins cleared (a pin names the server that minted it)."""
    copy = type(message)()
    copy.CopyFrom(message)
    for ref in getattr(copy, "media_refs", ()):
        ref.pin = b"" if isinstance(ref.pin, bytes) else ""
    return bytes(copy.SerializeToString(deterministic=True))


def _session_view(session: Any) -> bytes:
    copy = type(session)()
    copy.CopyFrom(session)
    copy.ClearField("modified_time")  # the upload's time, not the file's
    return bytes(copy.SerializeToString(deterministic=True))


@pytest.fixture
def bucket_env(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = seaweed.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _pairs(tmp_path: Path, prefix: str, codex: str = "") -> Iterator[tuple[ServerPair, ServerPair]]:
    local = ServerPair(
        tmp_path / "root",
        tmp_path / "state-local",
        codex=tmp_path / "codex-home" / "sessions" if codex else None,
    )
    remote = ServerPair(
        tmp_path / "unused",
        tmp_path / "state-bucket",
        transcripts=f"s3://{BUCKET}/{prefix}",
        codex=f"s3://{BUCKET}/{codex}/sessions" if codex else None,
    )
    try:
        for pair in (local, remote):
            pair.start_history(0)
            pair.start_media(0)
        yield local, remote
    finally:
        local.close()
        remote.close()


@pytest.mark.slow
def test_a_bucket_serves_what_the_same_tree_on_disk_serves(
    seaweed: SeaweedServer, bucket_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    _adversarial_tree(root)
    _corpus_tree(root)
    prefix = f"parity-{uuid.uuid4().hex[:8]}/projects"
    seaweed.upload_tree(root, prefix)
    for local, remote in _pairs(tmp_path, prefix):
        with (
            HistoryClient(local.history_addr) as lh,
            HistoryClient(remote.history_addr) as rh,
            MediaClient(local.media_addr) as lm,
            MediaClient(remote.media_addr) as rm,
        ):
            # The same sessions: a walk by pages may list a session twice while the insight
            # index moves it down the order (docs/contract.md §5), on disk or in a bucket.
            listed = sorted({s.session_id for s in lh.iter_sessions(page_size=7)})
            assert "not an id!" not in listed and len(listed) > 30
            assert sorted({s.session_id for s in rh.iter_sessions(page_size=7)}) == listed
            photos = 0
            for session_id in listed:
                for oldest_first in (True, False):
                    mine = [
                        [_plain(e) for e in w.entries] + [w.file_size_bytes.to_bytes(8)]
                        for w in lh.iter_windows(session_id, oldest_first=oldest_first, page_size=9)
                    ]
                    theirs = [
                        [_plain(e) for e in w.entries] + [w.file_size_bytes.to_bytes(8)]
                        for w in rh.iter_windows(session_id, oldest_first=oldest_first, page_size=9)
                    ]
                    assert theirs == mine, (session_id, oldest_first)
                local_refs = [r for e in lh.iter_window(session_id) for r in e.media_refs]
                remote_refs = [r for e in rh.iter_window(session_id) for r in e.media_refs]
                if not local_refs:
                    continue
                stats = [_plain_stat(s) for s in lm.stat_media(local_refs)]
                assert [_plain_stat(s) for s in rm.stat_media(remote_refs)] == stats
                for mine_ref, their_ref in zip(local_refs, remote_refs, strict=True):
                    assert rm.read_media(their_ref).data == lm.read_media(mine_ref).data
                    photos += 1
            assert photos >= 5
            for session_id in ("s-main", "s-other"):
                refs = [r for e in lh.iter_window(session_id) for r in e.media_refs]
                remote_refs = [r for e in rh.iter_window(session_id) for r in e.media_refs]
                for mine_ref, their_ref in zip(refs, remote_refs, strict=True):
                    thumbnail = lm.read_media(mine_ref, size=96).data
                    assert rm.read_media(their_ref, size=96).data == thumbnail
                images = lh.list_images(session_id)
                remote_images = rh.list_images(session_id)
                assert [_plain(i) for i in remote_images.images] == [
                    _plain(i) for i in images.images
                ]
                assert _plain(remote_images.totals) == _plain(images.totals)
                slim = [_plain_slim(m) for m in lh.slim_session(session_id, downscale=True)]
                assert [_plain_slim(m) for m in rh.slim_session(session_id, downscale=True)] == slim
            # Search and insight come from the indexer's passes over each root.
            _same_search_and_insight(lh, rh, listed)


def _hits(history: HistoryClient) -> list[tuple[str, int]]:
    return sorted((h.session_id, h.byte_offset) for h in history.search("zebras").hits)


def _same_search_and_insight(lh: HistoryClient, rh: HistoryClient, listed: list[str]) -> None:
    expected = _until(lambda: _hits(lh), lambda hits: len(hits) >= 3)
    assert len(expected) >= 3
    assert _until(lambda: _hits(rh), lambda hits: hits == expected) == expected
    for session_id in ("s-main", "s-other", "agent-legacy", listed[-1]):

        def local(sid: str = session_id) -> Any:
            return lh.get_session(sid)

        def remote(sid: str = session_id) -> bytes:
            return _session_view(rh.get_session(sid))

        def has_insight(session: Any) -> bool:
            return bool(session.HasField("insight") and session.insight.entry_counts)

        want = _session_view(_until(local, has_insight))
        assert _until(remote, want.__eq__) == want, session_id


def test_codex_rollouts_in_a_bucket_serve_as_on_disk(
    seaweed: SeaweedServer, bucket_env: dict[str, str], tmp_path: Path
) -> None:
    user = tmp_path / "root" / "proj"
    user.mkdir(parents=True)
    (user / "s1.jsonl").write_bytes(user_line("u1", "a claude session"))
    sessions = tmp_path / "codex-home" / "sessions"
    write_rollout(sessions, full_rollout("0199a213-81c0-7800-8aa1-bbab2a035a53"))
    write_rollout(
        sessions, full_rollout("0199a213-81c0-7800-8aa1-bbab2a035a54", seed=9), archived=True
    )
    prefix = f"codex-{uuid.uuid4().hex[:8]}"
    seaweed.upload_tree(tmp_path / "root", f"{prefix}/projects")
    seaweed.upload_tree(tmp_path / "codex-home", f"{prefix}/codex")
    for local, remote in _pairs(tmp_path, f"{prefix}/projects", codex=f"{prefix}/codex"):
        with (
            HistoryClient(local.history_addr) as lh,
            HistoryClient(remote.history_addr) as rh,
            MediaClient(local.media_addr) as lm,
            MediaClient(remote.media_addr) as rm,
        ):

            def listing(history: HistoryClient) -> list[tuple[str, str, str]]:
                return sorted(
                    (s.session_id, s.project_dir, s.title) for s in history.iter_sessions()
                )

            expected = listing(lh)
            assert len(expected) == 3 and CWD in {p for _, p, _ in expected}
            assert listing(rh) == expected
            for session_id, _, _ in expected:
                mine = [_plain(e) for e in lh.iter_window(session_id, page_size=4)]
                assert [_plain(e) for e in rh.iter_window(session_id, page_size=4)] == mine
                refs = [r for e in lh.iter_window(session_id) for r in e.media_refs]
                remote_refs = [r for e in rh.iter_window(session_id) for r in e.media_refs]
                for mine_ref, their_ref in zip(refs, remote_refs, strict=True):
                    assert rm.read_media(their_ref).data == lm.read_media(mine_ref).data


def _plain_stat(result: Any) -> bytes:
    copy = type(result)()
    copy.CopyFrom(result)
    if copy.HasField("metadata"):
        copy.metadata.ClearField("pin")
    return bytes(copy.SerializeToString(deterministic=True))


def _put(seaweed: SeaweedServer, key: str, data: bytes) -> None:
    obstore.put(seaweed.store(), key, data)


def test_a_rewritten_object_refuses_old_tokens_and_a_grown_one_keeps_them(
    seaweed: SeaweedServer, bucket_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"rewrite-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/proj/s1.jsonl"
    lines = [user_line(f"u{n}", f"prompt {n} " + "p" * 200) for n in range(40)]
    _put(seaweed, key, b"".join(lines))
    location = BucketLocation(BUCKET, prefix)
    bucket = Bucket(location, cache_bytes=0)  # every read a GET
    before = bucket.open(key)
    version = FileVersion.of(before)
    pair = ServerPair(tmp_path / "unused", tmp_path / "state", transcripts=location.url)
    try:
        pair.start_history(0)
        with HistoryClient(pair.history_addr, retry=NO_RETRY) as history:
            first = history.read_window("s1", page_size=10)
            assert [e.uuid for e in first.entries] == [f"u{n}" for n in range(30, 40)]
            # Grown: the same bytes and more (a sync tool re-uploading a growing session).
            grown = b"".join(lines) + user_line("u40", "the new tail")
            _put(seaweed, key, grown)
            after = bucket.open(key)
            assert after.info.etag != before.info.etag
            assert FileVersion.of(after) == version  # what is keyed by it (the line index) is kept
            with pytest.raises(ObjectChangedError):
                before.read(10, 0)  # the old version's bytes are never mixed with the new
            older = history.read_window("s1", page_size=10, page_token=first.next_page_token)
            assert [e.uuid for e in older.entries] == [f"u{n}" for n in range(20, 30)]
            latest = _until(
                lambda: history.read_window("s1", page_size=1),
                lambda window: [e.uuid for e in window.entries] == ["u40"],
            )
            assert [e.uuid for e in latest.entries] == ["u40"]
            # Rewritten from its start: the old version's tokens are refused.
            _put(seaweed, key, user_line("r0", "a different conversation") + grown[600:])
            assert FileVersion.of(bucket.open(key)) != version
            with pytest.raises(TranscriptRewritten):
                history.read_window("s1", page_size=10, page_token=older.next_page_token)
    finally:
        pair.close()


def test_a_photo_rewritten_in_place_is_refused_never_served_stale(
    seaweed: SeaweedServer, bucket_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"pin-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/proj/rw.jsonl"
    payload = png_bytes(200_000, seed=3)
    line = dumps(entry("u-rw", [media_image_block(payload)]))
    _put(seaweed, key, user_line("u0", "first") + line + b"\n")
    (ref,) = mint("rw", line)
    pair = ServerPair(
        tmp_path / "unused", tmp_path / "state", transcripts=f"s3://{BUCKET}/{prefix}"
    )
    try:
        pair.start_media(0)
        with MediaClient(pair.media_addr, retry=NO_RETRY) as media:
            assert media.read_media(ref).data == payload  # its blocks and decoded bytes cached
            # The same size and first bytes, another image: the version stays, the pin does not.
            other = base64.b64encode(png_bytes(200_000, seed=9))
            encoded = base64.b64encode(payload)
            assert len(other) == len(encoded)
            _put(seaweed, key, (user_line("u0", "first") + line + b"\n").replace(encoded, other))
            with pytest.raises(PinMismatch):
                media.read_media(ref)
    finally:
        pair.close()


def test_a_watch_sees_a_grown_object(
    seaweed: SeaweedServer, bucket_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"watch-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/proj/s1.jsonl"
    data = b"".join(user_line(f"u{n}", f"prompt {n}") for n in range(5))
    _put(seaweed, key, data)
    pair = ServerPair(
        tmp_path / "unused", tmp_path / "state", transcripts=f"s3://{BUCKET}/{prefix}"
    )
    try:
        pair.start_history(0)
        with HistoryClient(pair.history_addr) as history:
            header = history.bootstrap("s1").header
            assert header is not None
            _put(seaweed, key, data + assistant_line("a5", "the new tail"))
            for event in history.watch("s1", header.watch_position):
                assert event.entry is not None and event.entry.uuid == "a5"
                break
    finally:
        pair.close()


def test_a_failing_or_truncating_store_is_unavailable_never_wrong_bytes(
    seaweed: SeaweedServer,
    fault_proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name, value in seaweed.env(fault_proxy.endpoint).items():
        monkeypatch.setenv(name, value)
    prefix = f"fault-{uuid.uuid4().hex[:8]}"
    data = b"".join(user_line(f"u{n}", "x" * 300) for n in range(50))
    _put(seaweed, f"{prefix}/proj/s1.jsonl", data)
    # No block cache: every read is a GET, whatever the indexer has read meanwhile.
    pair = ServerPair(
        tmp_path / "unused",
        tmp_path / "state",
        transcripts=f"s3://{BUCKET}/{prefix}",
        bucket_cache_bytes=0,
    )
    try:
        pair.start_history(0)
        with HistoryClient(pair.history_addr, retry=NO_RETRY) as history:
            assert len(history.read_window("s1", page_size=5).entries) == 5
            for fault in (Fault.FAIL, Fault.TRUNCATE):
                fault_proxy.set(fault)
                with pytest.raises(TranscriptsUnavailable) as raised:
                    history.read_window("s1", page_size=5, oldest_first=True)
                assert raised.value.reason == Reason.TRANSCRIPTS_UNAVAILABLE
                assert prefix not in str(raised.value)
                assert fault_proxy.faulted >= 1
                fault_proxy.set(Fault.NONE)
            assert len(history.read_window("s1", page_size=5, oldest_first=True).entries) == 5
    finally:
        pair.close()


def test_a_short_range_answer_is_detected(
    seaweed: SeaweedServer, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in seaweed.env(fault_proxy.endpoint).items():
        monkeypatch.setenv(name, value)
    key = f"short-{uuid.uuid4().hex[:8]}/proj/s1.jsonl"
    data = os.urandom(3 * BLOCK_BYTES)
    _put(seaweed, key, data)
    bucket = Bucket(BucketLocation(BUCKET, ""), cache_bytes=0, retries=0, request_seconds=2)
    source = bucket.open(key)
    assert source.read(100, BLOCK_BYTES - 50) == data[BLOCK_BYTES - 50 : BLOCK_BYTES + 50]
    for fault in (Fault.TRUNCATE, Fault.FAIL, Fault.STALL):
        fault_proxy.set(fault)
        with pytest.raises(TranscriptsUnavailableError):
            source.read(BLOCK_BYTES, 0)
        fault_proxy.set(Fault.NONE)


def _start(env: dict[str, str], tmp_path: Path, location: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "history_service",
            "--transcripts",
            location,
            "--state",
            str(tmp_path / "state"),
            "--addr",
            "127.0.0.1:0",
            "--workers",
            "1",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_a_missing_bucket_or_refused_credentials_stop_the_start(
    seaweed: SeaweedServer, tmp_path: Path
) -> None:
    env = seaweed.env()
    missing = _start(env, tmp_path, "s3://no-such-bucket/projects")
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    refused = _start(wrong, tmp_path, f"s3://{BUCKET}/projects")
    assert refused.returncode == 2
    assert "refused the credentials" in refused.stderr
    assert "not-the-secret" not in refused.stderr
    assert env["AWS_ACCESS_KEY_ID"] not in refused.stderr
    assert len([r for r in refused.stderr.splitlines() if "bucket" in r]) == 1


def test_a_listing_pages_through_the_prefix_and_misses_share_it(
    seaweed: SeaweedServer, bucket_env: dict[str, str]
) -> None:
    prefix = f"many-{uuid.uuid4().hex[:8]}"
    store = seaweed.store()
    for n in range(1050):  # more than one page of 1000 keys
        obstore.put(store, f"{prefix}/p{n % 3}/s{n}.jsonl", b"{}\n")
    obstore.put(store, f"{prefix}/p0/s7/subagents/agent-a7.jsonl", b"{}\n")
    bucket = Bucket(BucketLocation(BUCKET, prefix), cache_bytes=BLOCK_BYTES)
    root = BucketRoot(bucket, rescan_interval=60)
    listed = root.list(None)
    assert len(listed) == 1051
    assert bucket.lists >= 3  # the call and two pages
    child = root.resolve("agent-a7", None)
    assert (child.parent_session_id, child.is_subagent, root.key_of(child)) == (
        "s7",
        True,
        "p0/s7/subagents/agent-a7.jsonl",
    )
    # Misses (ids that do not exist) list again at most once per MIN_LIST_SECONDS, whoever asks.
    refreshes = root.refreshes
    started = time.monotonic()
    for n in range(200):
        with pytest.raises(SessionNotFoundError):
            root.resolve(f"missing-{n}", None)
    elapsed = time.monotonic() - started
    assert root.refreshes - refreshes <= elapsed / MIN_LIST_SECONDS + 1


def test_listing_again_reads_no_object_bytes(
    seaweed: SeaweedServer, bucket_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"titles-{uuid.uuid4().hex[:8]}"
    store = seaweed.store()
    for n in range(20):
        obstore.put(store, f"{prefix}/proj/s{n}.jsonl", user_line(f"u{n}", f"title {n}"))
    pair = ServerPair(
        tmp_path / "unused", tmp_path / "state", transcripts=f"s3://{BUCKET}/{prefix}"
    )
    try:
        pair.start_history(0)
        assert pair.history is not None
        bucket = pair.history.core.root.bucket  # type: ignore[attr-defined]
        with HistoryClient(pair.history_addr) as history:
            titles = {s.session_id: s.title for s in history.iter_sessions()}
            assert titles == {f"s{n}": f"title {n}" for n in range(20)}

            def requests() -> tuple[int, int]:
                return bucket.heads, bucket.gets

            # Once the indexer's first pass is over, nothing else reads the objects.
            def unchanged(seen: tuple[int, int]) -> bool:
                time.sleep(0.5)
                return requests() == seen

            settled = _until(requests, unchanged)
            assert {s.session_id: s.title for s in history.iter_sessions()} == titles
            # Titles and insight are known for the versions listed: no HEAD, no GET.
            assert requests() == settled
    finally:
        pair.close()


def _profile_env(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, secret: str
) -> None:
    """Only a named profile in shared files of its own: no keys in the environment."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    env = seaweed.env()
    credentials.write_text(
        f"[team]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {secret}\n"
    )
    config.write_text("[profile team]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "team")
    monkeypatch.setenv("AWS_ENDPOINT_URL", env["AWS_ENDPOINT_URL"])


def test_a_named_profile_of_the_shared_files_reaches_the_bucket(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prefix = f"profile-{uuid.uuid4().hex[:8]}"
    obstore.put(seaweed.store(), f"{prefix}/proj/s1.jsonl", user_line("u1", "hello"))
    _profile_env(seaweed, monkeypatch, tmp_path, seaweed.env()["AWS_SECRET_ACCESS_KEY"])
    bucket = Bucket(BucketLocation(BUCKET, prefix), cache_bytes=BLOCK_BYTES)
    bucket.check()
    assert [t.session_id for t in BucketRoot(bucket, rescan_interval=60).list(None)] == ["s1"]


def test_a_profile_with_a_wrong_secret_is_refused_at_the_check(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _profile_env(seaweed, monkeypatch, tmp_path, "not-the-secret")
    with pytest.raises(BucketConfigError, match="refused the credentials") as raised:
        Bucket(BucketLocation(BUCKET, "anything"), cache_bytes=BLOCK_BYTES).check()
    assert "not-the-secret" not in str(raised.value)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(BucketConfigError, match="AWS profile"):
        Bucket(BucketLocation(BUCKET, "anything"), cache_bytes=BLOCK_BYTES)
