"""Pure-code tests: line scanning both ways, tokens, single-flight, the SQLite store, config."""

from __future__ import annotations

import base64
import os
import random
from collections.abc import Iterable
from pathlib import Path

import pytest

from history_service.accept import validate_accept
from history_service.config import ConfigError, HistoryConfig
from history_service.errors import (
    FileRewrittenError,
    InvalidArgumentError,
    TxnConflictError,
)
from history_service.lines import (
    BLOCK_BYTES,
    RawLine,
    iter_indexed,
    iter_lines_backward,
    iter_lines_forward,
)
from history_service.store.sqlite import SqliteAcceptedMessageStore
from history_service.tokens import (
    DIRECTION_LATEST_FIRST,
    DIRECTION_OLDEST_FIRST,
    PageToken,
    TokenCodec,
    WatchPosition,
)
from history_service.window_wire import json_parts
from scrollback.linefile import FileIdentity, FileVersion, LineFile, LocalSource
from scrollback.principals import ANONYMOUS as ANON


@pytest.mark.parametrize("seed", range(40))
def test_line_scans_agree_with_split(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lines = [b"x" * rng.choice([0, 1, 5, 300, 300_000, 700_000]) for _ in range(rng.randint(0, 10))]
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
    path = tmp_path / "f"
    path.write_bytes(data)
    max_line = rng.choice([10, 200, 400_000, 10**7])
    expected = []
    position = 0
    for part in data.split(b"\n"):
        if position >= len(data):
            break
        expected.append((position, position + len(part), position + len(part) < len(data)))
        position += len(part) + 1
    fd = LocalSource(os.open(path, os.O_RDONLY))
    try:
        forward = list(iter_lines_forward(fd, 0, len(data), max_line))
        assert [(r.start, r.end, r.terminated) for r in forward] == expected
        end = LineFile(fd).tail_start(len(data), len(data))
        backward = list(iter_lines_backward(fd, end, max_line))
        assert [(r.start, r.end) for r in backward] == [
            (a, b) for a, b, done in reversed(expected) if done and b < end
        ]
        for raw in forward + backward:
            if raw.size <= max_line:
                assert raw.data == data[raw.start : raw.end]
            else:
                assert raw.data is None or raw.size < 2 * BLOCK_BYTES
    finally:
        fd.close()


def _nonblank(lines: Iterable[RawLine | object]) -> list[tuple[int, int, bytes | None]]:
    """The lines an index may serve (it leaves blank lines out), as (start, end, bytes)."""
    return [(r.start, r.end, r.data) for r in lines if isinstance(r, RawLine) and r.size]


@pytest.mark.parametrize("seed", range(60))
def test_indexed_reads_agree_with_the_byte_scan_both_ways(tmp_path: Path, seed: int) -> None:
    """Through a right, a stale or a wrong line index, each direction yields the byte scan's lines."""
    rng = random.Random(seed)
    lines = [b"x" * rng.choice([0, 3, 40, 5000]) for _ in range(rng.randint(1, 40))]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "f"
    path.write_bytes(data)
    index: list[tuple[int, int]] = []
    position = 0
    for line in lines:
        if line:  # the index leaves blank lines out
            index.append((position, len(line)))
        position += len(line) + 1
    fault = rng.choice(["none", "stale", "wrong", "gap"])
    if fault == "stale" and index:
        index = index[: rng.randint(0, len(index))]
    elif fault == "wrong" and index:
        at = rng.randrange(len(index))
        index[at] = (index[at][0] + 1, index[at][1])
    elif fault == "gap" and len(index) > 2:
        del index[rng.randrange(1, len(index) - 1)]

    def rows_before(offset: int, limit: int) -> list[tuple[int, int]]:
        return [row for row in reversed(index) if row[0] < offset][:limit]

    def rows_from(offset: int, limit: int) -> list[tuple[int, int]]:
        return [row for row in index if row[0] >= offset][:limit]

    batch = rng.choice([1, 3, 208])
    fd = LocalSource(os.open(path, os.O_RDONLY))
    try:
        start = rng.choice([0, *(row[0] for row in index)])
        forward = iter_indexed(fd, start, len(data), 10**7, rows_from, backward=False, batch=batch)
        scanned = iter_lines_forward(fd, start, len(data), 10**7)
        assert _nonblank(forward) == _nonblank(scanned)
        end = rng.choice([len(data), *(row[0] for row in index)])
        backward = iter_indexed(fd, 0, end, 10**7, rows_before, backward=True, batch=batch)
        scanned = iter_lines_backward(fd, end, 10**7)
        assert _nonblank(backward) == _nonblank(scanned)
    finally:
        fd.close()


def test_json_parts_split_on_character_boundaries() -> None:
    text = ("aé€😀" * 700_000).encode()
    parts = json_parts(text, 1000_003)
    assert "".join(parts).encode() == text
    assert all(len(p.encode()) <= 1000_003 for p in parts)


def test_tokens_never_look_like_a_command_line_option() -> None:
    # `scrollback window S --older TOKEN`: a token starting with "-" would be taken for an
    # option (base64url has "-" among its characters).
    codec = TokenCodec(b"k" * 32)
    identity = FileIdentity(FileVersion(1, 2, 4096, 3), 10_000)
    tokens = [codec.position("s1", WatchPosition(identity, offset, 7)) for offset in range(300)]
    assert len(set(tokens)) == 300
    assert not [token for token in tokens if not token[:1].isalnum()]
    assert codec.parse_position("s1", tokens[5]) == WatchPosition(identity, 5, 7)


def test_tokens_show_nothing_of_what_they_hold() -> None:
    # A watch position holds the server-wide sequence number of accepted messages, which
    # would tell one tenant how many messages the others sent; page tokens hold file
    # identities and offsets. A client sees none of it; the same position is the same token.
    codec = TokenCodec(b"k" * 32)
    identity = FileIdentity(
        FileVersion(0x1122334455667788, 0x0102030405060708, 4096, 0x0A0B0C0D0E0F1011), 999
    )
    last_seq = 0x5EC0FFEE5EC0
    tokens = [codec.position("s1", WatchPosition(identity, 512, seq)) for seq in (last_seq, 1)]
    assert codec.position("s1", WatchPosition(identity, 512, last_seq)) == tokens[0]
    for token in tokens:
        raw = base64.urlsafe_b64decode(token[1:] + "=" * (-len(token[1:]) % 4))
        version = identity.version
        for value in (last_seq, version.dev, version.ino, version.head_hash):
            for width in (6, 8):
                assert value.to_bytes(8, "big")[-width:] not in raw
                assert value.to_bytes(8, "little")[:width] not in raw
        assert codec.parse_position("s1", token).identity == identity
    # Flipping any byte makes it not ours.
    raw = bytearray(base64.urlsafe_b64decode(tokens[0][1:] + "=" * (-len(tokens[0][1:]) % 4)))
    for at in range(len(raw)):
        changed = bytearray(raw)
        changed[at] ^= 1
        forged = tokens[0][0] + base64.urlsafe_b64encode(bytes(changed)).rstrip(b"=").decode()
        with pytest.raises(InvalidArgumentError):
            codec.parse_position("s1", forged)


# Tokens a client may hold, minted under the key b"k" * 32 before file versions were one type.
_HELD_PAGE_TOKEN = "t8Ayw-j7ODT4nziMFZFvugj6CAC7OS-gn-HeD708aTZZfGVtaK0zu4R79dP-TlfevK2VN_EkRx_MBvQbobMQ9T5q6dpltbg"
_HELD_POSITION = (
    "t4kE3wu_pgqNhXXn0ouuEPkM0y6xLvUID9XdnCovCk7eNy2mCjxVVB1X8mS1AfdI5k57Ns3hkNAiyIDReQxLwsPHwFQ"
)


def test_tokens_clients_hold_keep_decoding_to_the_same_file_version() -> None:
    codec = TokenCodec(b"k" * 32)
    version = FileVersion(0x1122334455667788, 0x0102030405060708, 4096, 0xF0E0D0C0B0A09080)
    identity = FileIdentity(version, 123456)
    page = PageToken(DIRECTION_LATEST_FIRST, identity, 4096, 2048, 0x0123456789ABCDEF)
    assert codec.parse_page_token("s1", _HELD_PAGE_TOKEN) == page
    assert codec.page_token("s1", page) == _HELD_PAGE_TOKEN
    assert codec.parse_position("s1", _HELD_POSITION) == WatchPosition(identity, 8192, 77)
    # The line index keeps the same version as hex text: rows already stored still match.
    assert version.hex_hash == "f0e0d0c0b0a09080"


def test_tokens_round_trip_and_refuse_tampering(tmp_path: Path) -> None:
    codec = TokenCodec(b"k" * 32)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n')
    fd = LocalSource(os.open(path, os.O_RDONLY))
    try:
        identity = FileIdentity.of(fd)
        token = codec.page_token("s1", PageToken(DIRECTION_OLDEST_FIRST, identity, 8))
        assert codec.parse_page_token("s1", token) == PageToken(DIRECTION_OLDEST_FIRST, identity, 8)
        for bad in ("", "x", token + "A", token[:-2], "!" * 30):
            with pytest.raises(InvalidArgumentError):
                codec.parse_page_token("s1", bad)
        with pytest.raises(InvalidArgumentError):
            codec.parse_page_token("s2", token)
        with pytest.raises(InvalidArgumentError):
            TokenCodec(b"j" * 32).parse_page_token("s1", token)
        with pytest.raises(InvalidArgumentError):
            codec.parse_position("s1", token)
        position = codec.position("s1", WatchPosition(identity, 16, 9))
        assert codec.parse_position("s1", position) == WatchPosition(identity, 16, 9)
        assert identity.check(fd, 8).size == identity.size
        with pytest.raises(FileRewrittenError):
            identity.check(fd, 3)  # not a line start
    finally:
        fd.close()
    path.write_bytes(b'{"c":1}\n{"b":2}\n')
    fd = LocalSource(os.open(path, os.O_RDONLY))
    try:
        with pytest.raises(FileRewrittenError):
            identity.check(fd, 8)
    finally:
        fd.close()


def test_store_idempotency_binding_and_retirement(tmp_path: Path) -> None:
    now = [1000.0]
    store = SqliteAcceptedMessageStore(tmp_path, keep=2, ttl_seconds=60, clock=lambda: now[0])
    try:
        request = validate_accept("t1", "", "key1", "hello", [])
        record, replayed = store.accept(ANON, request, set())
        assert not replayed and store.accept(ANON, request, set()) == (record, True)
        with pytest.raises(TxnConflictError):
            store.accept(ANON, validate_accept("t1", "", "key1", "changed", []), set())
        assert store.pending(ANON, "", "key1")[0] == [record]
        assert store.bind(ANON, "key1", "s1") == 1
        pending, last = store.pending(ANON, "s1", "")
        assert [p.seq for p in pending] == [record.seq] and last == record.seq
        for n in range(3):
            store.accept(ANON, validate_accept(f"u{n}", "s1", "", f"m{n}", []), set())
        assert [p.text for p in store.pending(ANON, "s1", "")[0]] == ["m1", "m2"]
        now[0] += 61
        assert store.pending(ANON, "s1", "")[0] == []
        assert [r.text for r in store.since(ANON, "s1", "", 0)] == ["hello", "m0", "m1", "m2"]
    finally:
        store.close()


def test_config_validation(tmp_path: Path) -> None:
    env = {"SCROLLBACK_TRANSCRIPTS": str(tmp_path), "SCROLLBACK_STATE": str(tmp_path / "s")}
    config = HistoryConfig.from_env(env).validate()
    assert config.addr == "127.0.0.1:50051" and config.transcripts == tmp_path
    with pytest.raises(ConfigError):
        HistoryConfig.from_env({"SCROLLBACK_TRANSCRIPTS": str(tmp_path / "missing")}).validate()
    with pytest.raises(ConfigError):
        HistoryConfig.from_env({**env, "SCROLLBACK_HISTORY_PENDING_KEEP": "x"})
    with pytest.raises(ConfigError):
        HistoryConfig.from_env(env, heartbeat_seconds=0).validate()
