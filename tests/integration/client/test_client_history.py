"""The history client over a real server: paging, chunk reassembly, typed errors, retries, watch."""

from __future__ import annotations

import threading
import time

import grpc
import orjson
import pytest

from client import AsyncHistoryClient, HistoryClient, RetryPolicy
from client.errors import FailedPrecondition, InvalidArgument, NotFound, ScrollbackError
from tests.support.servers import ServerPair, assistant_line, png, user_line

FAST_RETRY = RetryPolicy(max_attempts=40, initial_backoff=0.02, max_backoff=0.2)


def _session_lines(count: int) -> list[bytes]:
    lines: list[bytes] = []
    for n in range(count):
        if n == 17:  # a line whose stripped json is over 4 MiB: it arrives in chunks
            lines.append(user_line(f"u{n}", "prose " * 900_000))
        elif n % 50 == 3:
            lines.append(user_line(f"u{n}", f"photo {n}", images=(png(n),)))
        elif n % 2:
            lines.append(assistant_line(f"u{n}", f"answer {n}"))
        else:
            lines.append(user_line(f"u{n}", f"question {n}"))
    return lines


def test_iter_window_pages_a_whole_session_lazily(client_servers: ServerPair) -> None:
    lines = _session_lines(430)
    client_servers.transcript("s1").write_bytes(b"".join(lines))
    with HistoryClient(client_servers.history_addr) as history:
        entries = list(history.iter_window("s1", page_size=100))
        assert [e.uuid for e in entries] == [f"u{n}" for n in range(430)]
        big = entries[17]
        assert len(big.json.encode()) == big.json_size_bytes > 4 * 1024 * 1024
        assert orjson.loads(big.json) == orjson.loads(lines[17])
        assert len(entries[3].media_refs) == 1 and entries[3].media_refs[0].pin
        # latest first: the newest page first, each page in file order
        newest = next(history.iter_windows("s1", oldest_first=False, page_size=100))
        assert [e.uuid for e in newest.entries] == [f"u{n}" for n in range(330, 430)]
        assert newest.next_page_token
        lazy = history.iter_window("s1", page_size=10)
        assert next(lazy).uuid == "u0"  # one page fetched, not the session


async def test_async_iter_window_matches_sync(client_servers: ServerPair) -> None:
    client_servers.transcript("s2").write_bytes(b"".join(_session_lines(60)))
    async with AsyncHistoryClient(client_servers.history_addr) as history:
        uuids = [e.uuid async for e in history.iter_window("s2", page_size=7)]
        sessions = [s.session_id async for s in history.iter_sessions()]
    assert uuids == [f"u{n}" for n in range(60)]
    assert "s2" in sessions


def test_typed_errors_carry_code_and_message(client_servers: ServerPair) -> None:
    with HistoryClient(client_servers.history_addr) as history:
        with pytest.raises(NotFound) as missing:
            history.read_window("nope")
        assert missing.value.code == grpc.StatusCode.NOT_FOUND and missing.value.message
        assert str(missing.value).startswith("NOT_FOUND: ")
        client_servers.transcript("s3").write_bytes(user_line("a", "x"))
        with pytest.raises(InvalidArgument):
            history.read_window("s3", page_token="garbage!")
        with pytest.raises(InvalidArgument):
            history.read_window("s3", page_size=-1)
        with pytest.raises(ScrollbackError):
            history.accept_message("x", session_id="s3", attachments=[], txn_id="bad id")


def test_rewritten_transcript_is_failed_precondition(client_servers: ServerPair) -> None:
    path = client_servers.transcript("s4")
    path.write_bytes(b"".join(user_line(f"u{n}", "x") for n in range(30)))
    with HistoryClient(client_servers.history_addr) as history:
        first = history.read_window("s4", page_size=10)
        path.write_bytes(user_line("z", "rewritten"))
        with pytest.raises(FailedPrecondition):
            history.read_window("s4", page_size=10, page_token=first.next_page_token)


def test_retries_survive_a_server_restart(client_servers: ServerPair) -> None:
    client_servers.transcript("r1").write_bytes(b"".join(user_line(f"u{n}", "x") for n in range(5)))
    port = client_servers.history_port
    with HistoryClient(client_servers.history_addr, retry=FAST_RETRY) as history:
        assert len(history.read_window("r1").entries) == 5
        client_servers.stop_history()
        restarter = threading.Timer(0.6, client_servers.start_history, args=(port,))
        restarter.start()
        started = time.monotonic()
        window = history.read_window("r1")  # UNAVAILABLE, backoff, then the new server
        restarter.join()
        assert len(window.entries) == 5 and time.monotonic() - started >= 0.5
        # AcceptMessage is retried with the same txn id: accepted exactly once
        first = history.accept_message("hello", session_id="r1", txn_id="txn-restart")
        client_servers.stop_history()
        restarter = threading.Timer(0.4, client_servers.start_history, args=(port,))
        restarter.start()
        again = history.accept_message("hello", session_id="r1", txn_id="txn-restart")
        restarter.join()
        assert again.replayed and again.message.seq == first.message.seq
        boot = history.bootstrap("r1")
        assert boot.header is not None
        assert [m.client_txn_id for m in boot.header.pending] == ["txn-restart"]
    with (
        HistoryClient(
            client_servers.history_addr, retry=RetryPolicy(max_attempts=2, initial_backoff=0.01)
        ) as impatient,
    ):
        client_servers.stop_history()
        with pytest.raises(ScrollbackError) as raised:
            impatient.read_window("r1")
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE


def test_watch_resumes_across_a_restart_without_duplicates(client_servers: ServerPair) -> None:
    path = client_servers.transcript("w1")
    path.write_bytes(b"".join(user_line(f"u{n}", f"m{n}") for n in range(3)))
    port = client_servers.history_port
    failures: list[BaseException] = []

    # The watch has delivered all that was written before the server stops.
    delivered = threading.Event()

    def append(start: int, stop: int) -> None:
        for n in range(start, stop):
            with path.open("ab") as handle:
                handle.write(user_line(f"u{n}", f"m{n}"))
            time.sleep(0.02)  # lines arrive one by one, as an agent writes them

    def produce() -> None:
        try:
            with HistoryClient(client_servers.history_addr, retry=FAST_RETRY) as sender:
                append(3, 10)
                sender.accept_message("before", session_id="w1", txn_id="t-before")
                assert delivered.wait(15), "the watch never delivered the first lines"
                client_servers.stop_history()
                append(10, 16)  # written while the server is down
                time.sleep(0.3)  # the server stays down a moment on purpose: the watch retries
                client_servers.start_history(port)
                append(16, 20)
                sender.accept_message("after", session_id="w1", txn_id="t-after")
        except BaseException as error:  # surfaced by the main thread
            failures.append(error)

    entries: list[str] = []
    accepted: list[str] = []
    with HistoryClient(client_servers.history_addr, watch_retry=FAST_RETRY) as history:
        boot = history.bootstrap("w1")
        assert boot.header is not None
        watch = history.watch("w1", boot.header.watch_position)
        producer = threading.Thread(target=produce)
        producer.start()
        watchdog = threading.Timer(25, client_servers.stop_history)
        watchdog.start()
        try:
            for event in watch:
                if event.entry is not None:
                    entries.append(event.entry.uuid)
                elif event.accepted is not None:
                    accepted.append(event.accepted.text)
                if len(entries) >= 7 and accepted:
                    delivered.set()
                if len(entries) >= 17 and len(accepted) >= 2:
                    break
        finally:
            watch.close()
            watchdog.cancel()
            producer.join(10)
    assert not failures, failures
    assert entries == [f"u{n}" for n in range(3, 20)], "a line was lost or repeated"
    assert accepted == ["before", "after"], "an accepted message was lost or repeated"


async def test_async_watch_resumes_across_a_restart(client_servers: ServerPair) -> None:
    import asyncio

    path = client_servers.transcript("w2")
    path.write_bytes(user_line("u0", "m0"))
    port = client_servers.history_port

    # The watch has delivered the lines written before the server stops.
    delivered = threading.Event()

    def produce() -> None:
        for n in range(1, 5):
            with path.open("ab") as handle:
                handle.write(user_line(f"u{n}", f"m{n}"))
            time.sleep(0.03)  # lines arrive one by one, as an agent writes them
        assert delivered.wait(15), "the watch never delivered the first lines"
        client_servers.stop_history()
        for n in range(5, 9):
            with path.open("ab") as handle:
                handle.write(user_line(f"u{n}", f"m{n}"))
        time.sleep(0.3)  # the server stays down a moment on purpose: the watch retries
        client_servers.start_history(port)

    seen: list[str] = []
    async with AsyncHistoryClient(client_servers.history_addr, watch_retry=FAST_RETRY) as history:
        boot = await history.bootstrap("w2")
        assert boot.header is not None
        producer = asyncio.create_task(asyncio.to_thread(produce))

        async def consume() -> None:
            async for event in history.watch("w2", boot.header.watch_position):
                assert event.entry is not None
                seen.append(event.entry.uuid)
                if len(seen) == 4:
                    delivered.set()
                if len(seen) == 8:
                    return

        await asyncio.wait_for(consume(), 20)
        await producer
    assert seen == [f"u{n}" for n in range(1, 9)]
