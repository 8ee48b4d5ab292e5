"""opencode sessions from its SQLite database, through both real servers (docs/contract.md §1).

A database written with opencode's schema (tests/support/opencode.py) beside a
Claude Code session: listed with source "opencode", title, directory as the
project (tenancy filter), parent links; windows of one entry per message in
both directions, every data URL cut and the rest byte-exact; every image ref
(file parts and tool attachments) byte-exact through ReadMedia and
StatMedia; a part rewritten since the window is PIN_MISMATCH; a message still
streaming is held back until it completes; tokens survive new rows; a
database mid-migration is UNAVAILABLE; a 100 MB part is served without being
loaded whole.
"""

from __future__ import annotations

import hashlib
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from scrollback.contract.reasons import Reason
from scrollback.history.v1 import history_pb2 as pb
from scrollback.media.v1 import media_pb2
from scrollback.ref.v1 import ref_pb2
from tests.integration.history.test_codex_rollouts import Stubs as CodexStubs
from tests.support.media import png_bytes
from tests.support.opencode import DIRECTORY, Sample, file_part, write_sample
from tests.support.reasons import assert_reason
from tests.support.servers import ServerPair, user_line

# The payloads cut: every image of the sample (the default, 32 KiB, keeps smaller ones inline).
LIMIT = 1024


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    return write_sample(tmp_path / "opencode.db")


@pytest.fixture
def pair(tmp_path: Path, sample: Sample) -> Iterator[ServerPair]:
    made = ServerPair(tmp_path / "root", tmp_path / "state", opencode=sample.db.path)
    try:
        made.start_history(0)
        made.start_media(0)
        yield made
    finally:
        made.close()


class Stubs(CodexStubs):
    """The Codex suite's stubs, with the page size a request's own."""

    def window(self, session_id: str, **request: Any) -> tuple[list[pb.Entry], pb.WindowEnd]:
        entries: list[pb.Entry] = []
        end: pb.WindowEnd | None = None
        request.setdefault("page_size", 200)
        for message in self.history.ReadWindow(
            pb.ReadWindowRequest(session_id=session_id, **request), timeout=10
        ):
            kind = message.WhichOneof("item")
            if kind == "entry":
                entries.append(message.entry)
            elif kind == "end":
                end = message.end
        assert end is not None
        return entries, end


@pytest.fixture
def stubs(pair: ServerPair) -> Iterator[Stubs]:
    made = Stubs(pair)
    try:
        yield made
    finally:
        made.close()


def _message_rows(sample: Sample, session: str) -> list[tuple[str, bytes]]:
    """(message id, data bytes) of a session in opencode's order."""
    return [
        (mid, data.encode())
        for mid, data in sample.db.conn.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id",
            (session,),
        )
    ]


def test_sessions_listed_with_source_title_project_and_parent(
    pair: ServerPair, stubs: Stubs, sample: Sample
) -> None:
    pair.transcript("claude1").write_bytes(user_line("u1", "hello"))
    sessions = stubs.sessions()
    assert sessions["claude1"].source == "claude-code"
    top = sessions[sample.session]
    assert (top.source, top.title, top.project_dir) == ("opencode", "Fix the login page", DIRECTORY)
    child = sessions[sample.child]
    assert child.source == "opencode" and child.is_subagent
    assert child.parent_session_id == sample.session
    assert sessions[sample.other].project_dir == "/home/dev/other"
    only = stubs.history.ListSessions(pb.ListSessionsRequest(project_dir=DIRECTORY), timeout=10)
    assert {s.session_id for s in only.sessions} == {sample.session, sample.child}
    # A prefixed id names the same session.
    entries, _ = stubs.window("opencode:" + sample.session)
    assert entries


def test_window_is_one_entry_per_message_with_payloads_cut_and_the_rest_exact(
    stubs: Stubs, sample: Sample
) -> None:
    entries, end = stubs.window(
        sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
    )
    rows = _message_rows(sample, sample.session)
    # The last message (still streaming) is held back.
    assert [e.uuid for e in entries] == [mid for mid, _ in rows[:-1]]
    assert sample.streaming not in [e.uuid for e in entries]
    for entry, (mid, data) in zip(entries, rows, strict=False):
        assert entry.type == "opencode"
        served = orjson.loads(entry.json)
        assert served["uuid"] == mid
        assert orjson.dumps(served["payload"]["message"]) == orjson.dumps(orjson.loads(data))
        assert ";base64,iVBOR" not in entry.json
    photo = orjson.loads(entries[0].json)["payload"]["parts"][1]["data"]
    assert photo["type"] == "file" and photo["url"].startswith("data:image/png;base64,")
    # Latest first: the same entries, newest page first (each page in file order).
    seen: list[str] = []
    token = ""
    while True:
        page, end = stubs.window(sample.session, page_size=2, page_token=token)
        seen[:0] = [e.uuid for e in page]
        token = end.next_page_token
        if not token:
            break
    assert seen == [mid for mid, _ in rows[:-1]]


def _refs(entries: list[pb.Entry]) -> list[tuple[str, ref_pb2.MediaRef]]:
    return [(e.uuid, r) for e in entries for r in e.media_refs]


def test_every_image_resolves_byte_exact_and_a_rewrite_is_pin_mismatch(
    stubs: Stubs, sample: Sample
) -> None:
    entries, _ = stubs.window(
        sample.session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
    )
    refs = _refs(entries)
    assert len(refs) == 3  # the pasted image, two tool attachments
    for mid, ref in refs:
        assert ref.uri == f"{sample.session}/{mid}/{ref.index}"
        want = sample.db.images[mid][ref.index]
        for hint in (True, False):
            metadata, data = stubs.read(ref, hint=hint)
            assert data == want
            assert metadata.sha256 == hashlib.sha256(want).hexdigest()
            assert metadata.content_type == "image/png"
    stat = stubs.media.StatMedia(
        media_pb2.StatMediaRequest(
            media=[media_pb2.MediaSelector(media_ref=ref) for _, ref in refs]
        ),
        timeout=10,
    )
    assert [s.metadata.size_bytes for s in stat.results] == [
        len(sample.db.images[mid][ref.index]) for mid, ref in refs
    ]
    # The pasted image's part rewritten with another image: its old ref is PIN_MISMATCH.
    mid, ref = refs[0]
    part = sample.db.conn.execute(
        "SELECT id FROM part WHERE message_id = ? AND data LIKE '%\"file\"%'", (mid,)
    ).fetchone()[0]
    sample.db.update_part(part, file_part(png_bytes(30_000, seed=77)))
    with pytest.raises(grpc.RpcError) as failed:
        stubs.read(ref)
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert_reason(failed.value, Reason.PIN_MISMATCH)


def test_streaming_message_appears_once_completed_and_tokens_survive_new_rows(
    stubs: Stubs, sample: Sample
) -> None:
    first, end = stubs.window(sample.session, page_size=2, inline_limit_bytes=LIMIT)
    token = end.next_page_token
    assert token and sample.streaming not in [e.uuid for e in first]
    db = sample.db
    data = db.assistant_data(sample.messages[-1])
    db.part(sample.session, sample.streaming, {"type": "step-finish", "reason": "stop"})
    db.update_message(sample.streaming, data)
    newer = db.user(sample.session, "and another", png_bytes(10_000, seed=5))
    rest, _ = stubs.window(sample.session, page_size=100, page_token=token)
    rows = _message_rows(sample, sample.session)
    assert [e.uuid for e in rest + first] == [mid for mid, _ in rows[:5]]
    latest, _ = stubs.window(sample.session, page_size=2, inline_limit_bytes=LIMIT)
    assert [e.uuid for e in latest] == [sample.streaming, newer]
    ref = latest[1].media_refs[0]
    assert stubs.read(ref)[1] == db.images[newer][0]


def test_a_database_mid_migration_is_unavailable(
    tmp_path: Path, pair: ServerPair, stubs: Stubs, sample: Sample
) -> None:
    conn = sample.db.conn
    conn.execute("ALTER TABLE part RENAME TO __backup_part")
    with pytest.raises(grpc.RpcError) as failed:
        stubs.window(sample.child)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert_reason(failed.value, Reason.TRANSCRIPTS_UNAVAILABLE)
    assert str(tmp_path) not in (failed.value.details() or "")
    conn.execute("ALTER TABLE __backup_part RENAME TO part")
    entries, _ = stubs.window(sample.child)
    assert len(entries) == 2


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# Written in a child process, so this process's peak memory stays that of the servers.
_WRITE_BIG = """
import hashlib, sys
from pathlib import Path
from tests.support.media import png_bytes
from tests.support.opencode import OpencodeDb
db = OpencodeDb(Path(sys.argv[1]))
session = db.session("a huge attachment")
image = png_bytes(75 * 1024 * 1024, seed=11)
mid = db.user(session, "look", image)
db.assistant(session, mid, "seen")
db.close()
print(session, len(image), hashlib.sha256(image).hexdigest())
"""


def test_a_100_mb_part_is_read_without_loading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    written = subprocess.run(
        [sys.executable, "-c", _WRITE_BIG, str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    session, length, sha256 = written.stdout.split()
    pair = ServerPair(tmp_path / "root", tmp_path / "state", opencode=path)
    try:
        pair.start_history(0)
        pair.start_media(0)
        stubs = Stubs(pair)
        entries, _ = stubs.window(
            session, direction=pb.READ_DIRECTION_OLDEST_FIRST, inline_limit_bytes=LIMIT
        )
        ref = entries[0].media_refs[0]
        before = _peak_rss()
        size = 0
        digest = hashlib.sha256()
        for message in stubs.media.ReadMedia(
            media_pb2.ReadMediaRequest(media=media_pb2.MediaSelector(media_ref=ref)), timeout=120
        ):
            if message.WhichOneof("item") == "data":
                size += len(message.data)
                digest.update(message.data)
        grown = _peak_rss() - before
        stubs.close()
    finally:
        pair.close()
    assert size == int(length) and digest.hexdigest() == sha256
    # The servers run in this process: serving the part never held its 100 MB of text.
    assert grown < 64 * 1024 * 1024, grown
