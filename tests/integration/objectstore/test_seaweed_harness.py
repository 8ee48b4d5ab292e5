"""The S3 server and the fault proxy the object-storage tests rely on do what they say.

A proxy that faulted nothing would let every fault test pass vacuously, so its
faults are checked here against a real client (obstore) first.
"""

from __future__ import annotations

import threading
from pathlib import Path

import obstore
import pytest

from tests.support.seaweed import Fault, FaultProxy, SeaweedServer


def test_a_tree_uploads_under_a_prefix_and_lists_like_directories(
    seaweed: SeaweedServer, tmp_path: Path
) -> None:
    (tmp_path / "proj-a" / "s1" / "subagents").mkdir(parents=True)
    (tmp_path / "proj-a" / "s1.jsonl").write_bytes(b'{"type":"user"}\n')
    (tmp_path / "proj-a" / "s1" / "subagents" / "agent-x.jsonl").write_bytes(b"{}\n")
    (tmp_path / "proj-b").mkdir()
    (tmp_path / "proj-b" / "s2.jsonl").write_bytes(b"{}\n" * 3)
    keys = seaweed.upload_tree(tmp_path, "harness/tree")
    assert keys == [
        "harness/tree/proj-a/s1/subagents/agent-x.jsonl",
        "harness/tree/proj-a/s1.jsonl",
        "harness/tree/proj-b/s2.jsonl",
    ]
    listing = obstore.list_with_delimiter(seaweed.store(), "harness/tree/")
    assert sorted(listing["common_prefixes"]) == ["harness/tree/proj-a", "harness/tree/proj-b"]
    data = obstore.get_range(seaweed.store(), "harness/tree/proj-b/s2.jsonl", start=3, end=6)
    assert bytes(data) == b"{}\n"


def test_the_proxy_passes_reads_then_fails_truncates_and_stalls_them(
    seaweed: SeaweedServer, fault_proxy: FaultProxy
) -> None:
    payload = bytes(range(256)) * 64
    obstore.put(seaweed.store(), "harness/proxy.bin", payload)
    # No retries: each fault must reach the client as it happened.
    through = seaweed.store(endpoint=fault_proxy.endpoint, timeout="2s", retries=0)
    assert (
        bytes(obstore.get_range(through, "harness/proxy.bin", start=100, end=5000))
        == (payload[100:5000])
    )
    assert fault_proxy.requests["GET"] == 1

    fault_proxy.set(Fault.FAIL)
    with pytest.raises(Exception, match="503"):
        obstore.get_range(through, "harness/proxy.bin", start=0, end=10)
    assert fault_proxy.faulted == 1

    fault_proxy.set(Fault.TRUNCATE)
    with pytest.raises(Exception):  # noqa: B017 - obstore names no type for a short body
        obstore.get_range(through, "harness/proxy.bin", start=0, end=8000)
    assert fault_proxy.faulted == 1

    fault_proxy.set(Fault.STALL)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            obstore.get_range(through, "harness/proxy.bin", start=0, end=10)
        except BaseException as error:
            outcome.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(20)
    assert not reader.is_alive() and outcome, "a stalled read must time out at the client"
    fault_proxy.set(Fault.NONE)
    assert bytes(obstore.get_range(through, "harness/proxy.bin", start=0, end=10)) == payload[:10]
