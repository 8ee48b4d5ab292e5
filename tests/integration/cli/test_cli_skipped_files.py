"""Transcripts skipped for their names are said, not silent: the history service logs them."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from client import Client
from tests.support.servers import ServerPair, user_line


def _skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]


def _wait_for_lines(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    deadline = time.monotonic() + 20
    while len(lines := _skipped_lines(caplog)) < count:
        assert time.monotonic() < deadline, f"no skipped-files line: {lines}"
        time.sleep(0.05)
    return lines


def test_history_logs_the_files_it_skips_at_start_and_on_rescans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pair = ServerPair(tmp_path / "root", tmp_path / "state")
    try:
        pair.transcript("good-id").write_bytes(user_line("u0", "listed"))
        project = pair.root / "proj"
        for name in ("has space.jsonl", "dotted.name.jsonl", "ünï.jsonl", "x" * 65 + ".jsonl"):
            (project / name).write_bytes(user_line("u1", "not listed"))
        (project / "notes.meta.json").write_text("{}")  # not a transcript at all
        pair.start_history(0)
        pair.start_media(0)
        with Client(pair.history_addr, pair.media_addr) as sb:
            assert [s.session_id for s in sb.history.iter_sessions()] == ["good-id"]
        first = _wait_for_lines(caplog, 1)[0]
        assert "skipping 4 .jsonl file(s)" in first and "[A-Za-z0-9_-]{1,64}" in first
        assert "proj/dotted.name.jsonl" in first and "meta.json" not in first
        assert str(tmp_path) not in first  # names under the root, not the machine's paths
        (project / "one more.jsonl").write_bytes(user_line("u2", "not listed"))
        second = _wait_for_lines(caplog, 2)[1]
        assert "skipping 5 .jsonl file(s)" in second
        # Logged once per change: a pass after a new listed file says nothing more.
        pair.transcript("later").write_bytes(user_line("u3", "tangerine"))
        with Client(pair.history_addr, pair.media_addr) as sb:
            deadline = time.monotonic() + 20
            while not sb.history.search("tangerine").hits:
                assert time.monotonic() < deadline, "the new file was not indexed"
                time.sleep(0.05)
        assert len(_skipped_lines(caplog)) == 2
    finally:
        pair.close()
