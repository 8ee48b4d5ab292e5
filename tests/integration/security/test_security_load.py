"""A short bounded load run: zero errors, latencies reported, server memory flat."""

from __future__ import annotations

import os

import pytest

from scrollback_app.loadtest import run_load

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("SCROLLBACK_LOAD_SECONDS", "8"))


def test_short_load_run_has_no_errors_and_flat_memory() -> None:
    report = run_load(seconds=SECONDS, clients=4)
    print(report.render())
    assert report.total_errors == 0, report.error_samples
    assert report.calls["window"] > 20 and report.calls["media"] > 20 and report.calls["accept"] > 5
    for name in ("history", "media"):
        first, second = report.first_half_rss_kib[name], report.second_half_rss_kib[name]
        assert first > 0 and second > 0
        assert second <= first * 1.25 + 24 * 1024, (name, first, second)
