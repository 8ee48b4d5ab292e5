"""The line rules and the line walker over an ObjectSource of a real SeaweedFS.

The same checks as tests/unit/test_linefile.py runs over a local file and a
MemorySource (tests/support/line_rules.py), with each example's bytes put as
an object and read back by ranged GETs through the bucket's block cache.
"""

from __future__ import annotations

import uuid

import obstore
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrollback.linefile import LineFile
from scrollback.objects import Bucket, BucketLocation
from tests.support.line_rules import (
    BODIES,
    LONG_BODIES,
    check_line_rules,
    check_walks,
    joined,
)
from tests.support.seaweed import BUCKET, SeaweedServer


def _bucket(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> tuple[Bucket, str]:
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    prefix = f"line-rules-{uuid.uuid4().hex[:8]}"
    return Bucket(BucketLocation(BUCKET, prefix), cache_bytes=64 * 1024 * 1024), prefix


def test_every_rule_agrees_with_the_model_over_an_object(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, prefix = _bucket(seaweed, monkeypatch)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(BODIES, max_size=8), st.booleans())
    def check(bodies: list[bytes], unterminated: bool) -> None:
        data = joined(bodies, unterminated)
        key = f"{prefix}/{uuid.uuid4().hex}.jsonl"
        obstore.put(seaweed.store(), key, data)
        with bucket.open(key) as source:
            check_line_rules(LineFile(source), data)
            check_walks(source, data, max_line=30)

    check()


def test_walks_of_long_lines_agree_with_the_model_over_an_object(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, prefix = _bucket(seaweed, monkeypatch)

    @settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(LONG_BODIES, max_size=4), st.booleans())
    def check(bodies: list[bytes], unterminated: bool) -> None:
        data = joined(bodies, unterminated)
        key = f"{prefix}/{uuid.uuid4().hex}.jsonl"
        obstore.put(seaweed.store(), key, data)
        with bucket.open(key) as source:
            check_walks(source, data, max_line=500_000)

    check()
