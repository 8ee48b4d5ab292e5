"""Two history and two media server PROCESSES over one PostgreSQL database.

Each test starts `python -m history_service` / `python -m media_service`
twice with `--database-url` on a fresh database and one shared state dir
(the token key and the blobs volume), then drives them only through their
ports: an accept answered by one history replica reaches a watch on the
other with no gap and no duplicate; a blob written through one media replica
is read through the other; the same client_txn_id racing on both history
replicas records one message; both media replicas collecting at once delete
the right blobs, once, with no error; and when the database ends every
connection (a restart, a failover, an idle-connection reaper), idle or under
load, no client call fails.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2 as mpb
from scrollback.media.v1 import media_pb2_grpc
from scrollback.search.v1 import search_pb2 as spb
from scrollback.search.v1 import search_pb2_grpc
from tests.support.backends import ADMIN_URL
from tests.support.reasons import assert_reason
from tests.support.security import port_from_log
from tests.support.servers import png, user_line

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
GRACE = 2.0  # the media replicas' GC grace period in these tests


@dataclass
class Replica:
    """One server process."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Cluster:
    """Two history and two media replicas on one database and one state dir."""

    url: str
    state: Path
    root: Path
    history: list[Replica]
    media: list[Replica]


def _wait_healthy(replica: Replica, deadline: float) -> None:
    with grpc.insecure_channel(replica.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            assert replica.process.poll() is None, replica.log.read_text()
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, f"{replica.name} never became healthy"
            time.sleep(0.1)


@pytest.fixture
def cluster(make_database: Callable[[], str], tmp_path: Path) -> Iterator[Cluster]:
    url = make_database()
    state, root = tmp_path / "state", tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")} | {
        "SCROLLBACK_MEDIA_GC_GRACE_SECONDS": str(GRACE),
        "SCROLLBACK_MEDIA_GC_INTERVAL_SECONDS": "0.3",
        "SCROLLBACK_HISTORY_WATCH_POLL_SECONDS": "0.05",
        "SCROLLBACK_HISTORY_HEARTBEAT_SECONDS": "1",
        # Wake-ups must come from NOTIFY: the listener's safety resync is out of reach.
        "SCROLLBACK_HISTORY_BUS_RESYNC_SECONDS": "60",
    }
    replicas: list[Replica] = []
    try:
        for service in ("history", "media", "history", "media"):
            name = f"{service}-{sum(r.name.startswith(service) for r in replicas) + 1}"
            log = tmp_path / f"{name}.log"
            command = [
                sys.executable,
                "-m",
                f"{service}_service",
                "--transcripts",
                str(root),
                "--state",
                str(state),
                "--addr",
                "127.0.0.1:0",
                "--database-url",
                url,
            ]
            with log.open("wb") as sink:
                process = subprocess.Popen(
                    command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT
                )
            replicas.append(Replica(name, 0, process, log))
        deadline = time.monotonic() + 30
        for replica in replicas:
            replica.port = port_from_log(replica.log, replica.process, deadline)
            _wait_healthy(replica, deadline)
        yield Cluster(
            url,
            state,
            root,
            [r for r in replicas if r.name.startswith("history")],
            [r for r in replicas if r.name.startswith("media")],
        )
    finally:
        for replica in replicas:
            replica.process.terminate()
        codes: dict[str, int] = {}
        for replica in replicas:
            try:
                codes[replica.name] = replica.process.wait(10)
            except subprocess.TimeoutExpired:
                replica.process.kill()
                codes[replica.name] = replica.process.wait()
        assert set(codes.values()) <= {0}, f"SIGTERM must stop every replica cleanly: {codes}"


@pytest.fixture
async def stubs(
    cluster: Cluster,
) -> AsyncIterator[
    tuple[list[history_pb2_grpc.HistoryServiceStub], list[media_pb2_grpc.MediaServiceStub]]
]:
    channels = [grpc.aio.insecure_channel(r.address) for r in cluster.history + cluster.media]
    history = [history_pb2_grpc.HistoryServiceStub(c) for c in channels[:2]]
    media = [media_pb2_grpc.MediaServiceStub(c) for c in channels[2:]]
    try:
        yield history, media
    finally:
        for channel in channels:
            await channel.close()


async def _write_blob(stub: media_pb2_grpc.MediaServiceStub, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()

    async def requests() -> AsyncIterator[mpb.WriteBlobRequest]:
        yield mpb.WriteBlobRequest(
            header=mpb.WriteBlobHeader(sha256=sha, size_bytes=len(data), media_type="image/png")
        )
        yield mpb.WriteBlobRequest(data=data)

    answer = await stub.WriteBlob(requests())
    assert answer.ref == f"media:{sha}"
    return str(answer.ref)


async def _read_blob(stub: media_pb2_grpc.MediaServiceStub, ref: str) -> bytes:
    data = b""
    request = mpb.ReadMediaRequest(media=mpb.MediaSelector(blob_ref=ref))
    async for message in stub.ReadMedia(request):
        if message.WhichOneof("item") == "data":
            data += message.data
    return data


async def test_watch_on_one_replica_sees_accepts_answered_by_the_other(
    cluster: Cluster, stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[object]]
) -> None:
    (one, two), _ = stubs
    (cluster.root / "proj" / "s1.jsonl").write_bytes(b'{"type":"user","uuid":"u0"}\n')
    headers: list[hpb.BootstrapHeader] = []
    async for message in two.Bootstrap(hpb.BootstrapRequest(session_id="s1")):
        if message.WhichOneof("item") == "header":
            headers.append(message.header)
    position = headers[0].watch_position
    seen: list[str] = []
    expected = [f"m{n}" for n in range(20)]

    async def accept_all() -> None:
        for n, text in enumerate(expected):
            stub = one if n < 10 else two  # the second half answered by the watcher's replica
            await stub.AcceptMessage(
                hpb.AcceptMessageRequest(client_txn_id=f"t{n}", session_id="s1", text=text)
            )
            await asyncio.sleep(0.01)

    producer = asyncio.create_task(accept_all())
    deadline = time.monotonic() + 20
    # Watch on replica two, reconnecting (alternately to replica one) every few events.
    watchers = [two, one]
    round_ = 0
    while len(seen) < len(expected) and time.monotonic() < deadline:
        call = watchers[round_ % 2].WatchSession(
            hpb.WatchSessionRequest(session_id="s1", position=position)
        )
        budget = 4
        try:
            async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                async for event in call:
                    if event.WhichOneof("event") == "accepted":
                        seen.append(event.accepted.text)
                        budget -= 1
                    if event.position:
                        position = event.position
                    if budget == 0 or len(seen) >= len(expected):
                        break
        except TimeoutError:
            pass
        call.cancel()
        round_ += 1
    await producer
    assert seen == expected, "an accept was lost or repeated across replicas"
    pending: list[str] = []
    async for message in one.Bootstrap(hpb.BootstrapRequest(session_id="s1")):
        if message.WhichOneof("item") == "header":
            pending = [m.text for m in message.header.pending]
    assert pending == expected[-len(pending) :] and pending


async def test_the_bus_wakes_the_other_replica_at_once(
    cluster: Cluster, stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[object]]
) -> None:
    """NOTIFY, not the listener's once-a-second resync, delivers the wake-up."""
    (one, two), _ = stubs
    call = two.WatchSession(hpb.WatchSessionRequest(chat_key="live"))
    events = call.__aiter__()
    await asyncio.wait_for(events.__anext__(), 5)  # the first heartbeat: the watch is live
    delays: list[float] = []
    for n in range(5):
        started = time.monotonic()
        await one.AcceptMessage(
            hpb.AcceptMessageRequest(client_txn_id=f"live{n}", chat_key="live", text=f"n{n}")
        )
        while True:
            event = await asyncio.wait_for(events.__anext__(), 5)
            if event.WhichOneof("event") == "accepted":
                assert event.accepted.text == f"n{n}"
                break
        delays.append(time.monotonic() - started)
    call.cancel()
    assert sorted(delays)[2] < 0.5, delays


async def test_blob_written_through_one_media_replica_is_read_through_the_other(
    stubs: tuple[list[object], list[media_pb2_grpc.MediaServiceStub]],
) -> None:
    _, (one, two) = stubs
    data = os.urandom(300_000)
    ref = await _write_blob(one, data)
    missing = await two.FindMissingBlobs(
        mpb.FindMissingBlobsRequest(sha256=[ref.removeprefix("media:"), "0" * 64])
    )
    assert list(missing.missing_sha256) == ["0" * 64]
    assert await _read_blob(two, ref) == data


async def test_same_txn_id_racing_on_two_replicas_records_one_message(
    cluster: Cluster, stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[object]]
) -> None:
    (one, two), _ = stubs
    (cluster.root / "proj" / "r.jsonl").write_bytes(b'{"type":"user","uuid":"u0"}\n')
    for n in range(15):
        request = hpb.AcceptMessageRequest(client_txn_id=f"race{n}", session_id="r", text="same")
        answers = await asyncio.gather(one.AcceptMessage(request), two.AcceptMessage(request))
        assert answers[0].message == answers[1].message
        assert sorted(a.replayed for a in answers) == [False, True]
    with psycopg.connect(cluster.url) as connection:
        row = connection.execute(
            "SELECT COUNT(*), COUNT(DISTINCT client_txn_id) FROM accepted_message"
        ).fetchone()
    assert row == (15, 15)


async def test_both_media_replicas_collecting_delete_the_right_blobs_once(
    cluster: Cluster,
    stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[media_pb2_grpc.MediaServiceStub]],
) -> None:
    (history, _), (one, two) = stubs
    (cluster.root / "proj" / "g.jsonl").write_bytes(b'{"type":"user","uuid":"u0"}\n')
    kept = await _write_blob(one, b"referenced photo")
    doomed = [await _write_blob(two if n % 2 else one, os.urandom(100 + n)) for n in range(6)]
    await history.AcceptMessage(
        hpb.AcceptMessageRequest(
            client_txn_id="keep",
            session_id="g",
            text="with a photo",
            attachments=[hpb.Attachment(ref=kept, name="a.png", media_type="image/png")],
        )
    )
    sha = [ref.removeprefix("media:") for ref in doomed]
    deadline = time.monotonic() + GRACE + 10
    while time.monotonic() < deadline:
        answer = await two.FindMissingBlobs(mpb.FindMissingBlobsRequest(sha256=sha))
        if len(answer.missing_sha256) == len(sha):
            break
        await asyncio.sleep(0.2)
    assert sorted(answer.missing_sha256) == sorted(sha), "unreferenced blobs were not collected"
    assert await _read_blob(one, kept) == b"referenced photo"
    blobs = cluster.state / "blobs"
    files = [p.relative_to(blobs) for p in blobs.rglob("*") if p.is_file()]
    assert [p.name for p in files if p.parts[0] != "tmp"] == [kept.removeprefix("media:")]
    logs = "".join(r.log.read_text() for r in cluster.media)
    assert "garbage collection failed" not in logs and "Traceback" not in logs
    removed = sum(int(n) for n in re.findall(r"gc removed (\d+) unreferenced", logs))
    assert removed == len(doomed), "each blob is deleted exactly once across replicas"


def test_unreachable_database_is_one_line_without_the_url(tmp_path: Path) -> None:
    url = "postgresql://scrollback:s3cret-pw@127.0.0.1:1/nowhere"
    (tmp_path / "root").mkdir()
    for service in ("history_service", "media_service"):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                service,
                "--transcripts",
                str(tmp_path / "root"),
                "--state",
                str(tmp_path / "state"),
                "--addr",
                "127.0.0.1:0",
                "--database-url",
                url,
            ],
            cwd=REPO,
            capture_output=True,
            timeout=30,
            env={k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")},
        )
        assert result.returncode == 2, result.stderr
        assert b"s3cret" not in result.stderr + result.stdout
        assert b"SCROLLBACK_DATABASE_URL" in result.stderr


def test_client_balances_over_both_history_replicas_and_survives_losing_one(
    cluster: Cluster,
) -> None:
    from client.history import HistoryClient

    addresses = ",".join(r.address for r in cluster.history)
    with HistoryClient(addresses) as client:
        for _ in range(20):
            client.list_sessions()
        served = [r.log.read_text().count("method=ListSessions") for r in cluster.history]
        assert all(count > 0 for count in served), f"round_robin must use both replicas: {served}"
        cluster.history[0].process.terminate()
        cluster.history[0].process.wait(10)
        for _ in range(5):
            client.list_sessions()  # retried on the replica that is left
    assert cluster.history[1].log.read_text().count("method=ListSessions") >= served[1] + 5


def _terminate_connections(url: str) -> int:
    """End every connection to the test's own database, as a restart or failover does."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (url.rsplit("/", 1)[1],),
        ).fetchall()
    return sum(1 for (ended,) in rows if ended)


async def _every_rpc_kind(cluster: Cluster, round_: int, photo_ref: str) -> dict[str, list[str]]:
    """One call of each kind that reaches the database, on each replica: the failures by kind."""
    failures: dict[str, list[str]] = {}
    channels = [grpc.aio.insecure_channel(r.address) for r in cluster.history + cluster.media]
    try:
        for n, channel in enumerate(channels[:2]):
            history = history_pb2_grpc.HistoryServiceStub(channel)
            search = search_pb2_grpc.SearchServiceStub(channel)
            tag = f"{round_}-{n}"
            calls: dict[str, Callable[[], Any]] = {
                "AcceptMessage": lambda h=history, t=tag: h.AcceptMessage(
                    hpb.AcceptMessageRequest(client_txn_id=f"k{t}", chat_key=f"c{t}", text=t)
                ),
                "BindChatKey": lambda h=history, t=tag: h.BindChatKey(
                    hpb.BindChatKeyRequest(chat_key=f"c{t}", session_id="s1")
                ),
                "Bootstrap": lambda h=history: _drain(
                    h.Bootstrap(hpb.BootstrapRequest(session_id="s1"))
                ),
                "ReadWindow": lambda h=history: _drain(
                    h.ReadWindow(hpb.ReadWindowRequest(session_id="s1"))
                ),
                "ListSessions": lambda h=history: h.ListSessions(hpb.ListSessionsRequest()),
                "GetSession": lambda h=history: h.GetSession(
                    hpb.GetSessionRequest(session_id="s1")
                ),
                "Search": lambda s=search: _drain(s.Search(spb.SearchRequest(query="hello"))),
            }
            await _call_all(calls, failures)
        sha = photo_ref.removeprefix("media:")
        selector = mpb.MediaSelector(blob_ref=photo_ref)
        for channel in channels[2:]:
            media = media_pb2_grpc.MediaServiceStub(channel)
            calls = {
                "WriteBlob": lambda m=media: _write_blob(m, os.urandom(64)),
                "FindMissingBlobs": lambda m=media: m.FindMissingBlobs(
                    mpb.FindMissingBlobsRequest(sha256=[sha])
                ),
                "ReadMedia": lambda m=media: _read_blob(m, photo_ref),
                "StatMedia": lambda m=media: m.StatMedia(mpb.StatMediaRequest(media=[selector])),
            }
            await _call_all(calls, failures)
    finally:
        for channel in channels:
            await channel.close()
    return failures


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


async def _call_all(calls: dict[str, Callable[[], Any]], failures: dict[str, list[str]]) -> None:
    for kind, call in calls.items():
        try:
            await call()
        except grpc.RpcError as error:
            failures.setdefault(kind, []).append(f"{error.code().name}: {error.details()}")


async def test_no_client_call_fails_when_the_database_ends_idle_connections(
    cluster: Cluster,
    stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[media_pb2_grpc.MediaServiceStub]],
) -> None:
    (cluster.root / "proj" / "s1.jsonl").write_bytes(
        b'{"type":"user","uuid":"u0","message":{"role":"user","content":"hello"}}\n'
    )
    (history, _), (media, _) = stubs
    photo = await _write_blob(media, b"a photo")
    # Referenced, so the replicas' collection keeps it for the whole test.
    await history.AcceptMessage(
        hpb.AcceptMessageRequest(
            client_txn_id="photo",
            session_id="s1",
            text="with a photo",
            attachments=[hpb.Attachment(ref=photo, name="a.png", media_type="image/png")],
        )
    )
    assert await _every_rpc_kind(cluster, 0, photo) == {}, "the cluster must serve before"
    for round_ in range(1, 4):
        assert _terminate_connections(cluster.url) > 0
        assert await _every_rpc_kind(cluster, round_, photo) == {}


async def test_no_accept_fails_when_the_database_ends_connections_under_load(
    cluster: Cluster, stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[object]]
) -> None:
    (one, two), _ = stubs
    (cluster.root / "proj" / "load.jsonl").write_bytes(b'{"type":"user","uuid":"u0"}\n')
    total, workers, kills = 300, 12, 6
    done: list[int] = []
    progressed = asyncio.Event()
    failures: list[str] = []
    ended: list[int] = []

    async def accept(worker: int) -> None:
        for n in range(worker, total, workers):
            stub = one if n % 2 else two
            try:
                await stub.AcceptMessage(
                    hpb.AcceptMessageRequest(client_txn_id=f"l{n}", session_id="load", text=f"{n}")
                )
            except grpc.RpcError as error:
                failures.append(f"{error.code().name}: {error.details()}")
            done.append(n)
            progressed.set()

    async def terminate() -> None:
        # Every `total // (kills + 1)` completed accepts, while the others are in flight.
        for kill in range(1, kills + 1):
            while len(done) < kill * total // (kills + 1):
                progressed.clear()
                await progressed.wait()
            ended.append(await asyncio.to_thread(_terminate_connections, cluster.url))

    await asyncio.wait_for(
        asyncio.gather(terminate(), *(accept(w) for w in range(workers))), timeout=120
    )
    assert failures == [], f"{len(failures)} of {total} accepts failed: {failures[:5]}"
    assert len(ended) == kills and all(ended), ended
    # Each accept's NOTIFY went out too (retried like any statement), not only its row.
    logs = "".join(r.log.read_text() for r in cluster.history)
    assert "bus notify failed" not in logs
    with psycopg.connect(cluster.url) as connection:
        row = connection.execute(
            "SELECT COUNT(*), COUNT(DISTINCT client_txn_id) FROM accepted_message"
        ).fetchone()
    assert row == (total, total)


def _allow_connections(url: str, allowed: bool) -> None:
    """Let the test's database accept connections or refuse them all (a database gone)."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS {str(allowed).lower()}")


async def _window(stub: history_pb2_grpc.HistoryServiceStub, **request: Any) -> hpb.WindowEnd:
    """A window's end, the entries' media refs appended to `request["refs"]` if given."""
    refs = request.pop("refs", None)
    end = hpb.WindowEnd()
    async for message in stub.ReadWindow(hpb.ReadWindowRequest(**request), timeout=3):
        item = message.WhichOneof("item")
        entries = [message.entry] if item == "entry" else list(message.entries.entries)
        if refs is not None:
            refs.extend(ref for entry in entries for ref in entry.media_refs)
        if item == "end":
            end = message.end
    return end


async def test_file_reads_do_not_wait_on_an_unreachable_database(
    cluster: Cluster,
    stubs: tuple[list[history_pb2_grpc.HistoryServiceStub], list[media_pb2_grpc.MediaServiceStub]],
) -> None:
    """With the database gone, windows and transcript photos are served from the files at
    once (a deadline shorter than the pool's timeout), a call that needs the database is
    UNAVAILABLE at once saying why, and all is served again once the database is back."""
    (history, other), (media, _) = stubs
    photo = png(1, 120)
    lines = [user_line(f"u{n}", f"line {n}", images=(photo,) if n == 35 else ()) for n in range(40)]
    (cluster.root / "proj" / "f1.jsonl").write_bytes(b"".join(lines))
    refs: list[Any] = []
    first = await _window(history, session_id="f1", page_size=10, refs=refs)
    second = await _window(history, session_id="f1", page_size=10, page_token=first.next_page_token)
    await _window(
        history, session_id="f1", page_size=10, page_token=second.next_page_token, refs=refs
    )
    assert len(refs) == 1
    selector = mpb.MediaSelector(media_ref=refs[0])
    try:
        _allow_connections(cluster.url, False)
        _terminate_connections(cluster.url)
        for stub in (history, other):
            for _ in range(3):
                again = await _window(stub, session_id="f1", page_size=10)
                assert again.next_page_token == first.next_page_token
                await _window(
                    stub, session_id="f1", page_size=10, page_token=second.next_page_token
                )
        for _ in range(3):
            data = b""
            async for message in media.ReadMedia(mpb.ReadMediaRequest(media=selector), timeout=3):
                data += message.data if message.WhichOneof("item") == "data" else b""
            assert data == photo
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await history.AcceptMessage(
                hpb.AcceptMessageRequest(client_txn_id="gone", session_id="f1", text="x"),
                timeout=3,
            )
        assert assert_reason(refused.value, Reason.STORE_BUSY)
        assert "unreachable" in (refused.value.details() or "")
    finally:
        _allow_connections(cluster.url, True)
    deadline = time.monotonic() + 30
    while True:
        try:
            await history.AcceptMessage(
                hpb.AcceptMessageRequest(client_txn_id="back", session_id="f1", text="x"),
                timeout=6,
            )
            break
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            assert time.monotonic() < deadline, "the database came back, the service did not"
            await asyncio.sleep(0.1)
