"""The pure rules of `scrollback slim` and `images`: API numbering (docs/contract.md §14), stand-ins, install paths."""

from __future__ import annotations

from typing import Any

from history_service.numbering import api_positions, entry_facts
from history_service.slim_blocks import stand_in_text


def _entry(kind: str, uuid: str, parent: str | None, blocks: int = 1, **extra: Any) -> Any:
    content = [{"type": "text", "text": "x"}] * blocks
    return entry_facts(
        {"type": kind, "uuid": uuid, "parentUuid": parent, "message": {"content": content}, **extra}
    )


def test_chain_merge_and_branches() -> None:
    entries = [
        _entry("user", "u1", None, 2),
        _entry("assistant", "a1", "u1"),  # messages.1
        _entry("assistant", "a1b", "a1"),  # the same message, streamed on
        _entry("user", "dead", "a1b", 3),  # an abandoned branch (rewound)
        _entry("system", "s1", "a1b"),  # not a message, but on the chain
        _entry("user", "u2", "s1", 2),  # messages.2
        _entry("user", "u3", "u2"),  # merged into messages.2 at offset 2
        _entry("assistant", "err", "u3", isApiErrorMessage=True),  # never sent
        _entry("assistant", "a2", "err"),  # messages.3
    ]
    positions = api_positions(entries)
    assert positions == {
        0: (0, 0),
        1: (1, 0),
        2: (1, 1),
        5: (2, 0),
        6: (2, 2),
        8: (3, 0),
    }


def test_compact_boundary_restarts_the_numbering() -> None:
    entries = [
        _entry("user", "old", None),
        _entry("assistant", "olda", "old"),
        _entry("system", "boundary", None, subtype="compact_boundary"),
        _entry("user", "summary", "boundary"),
        _entry("assistant", "a", "summary"),
    ]
    assert api_positions(entries) == {3: (0, 0), 4: (1, 0)}


def test_stand_in_text_is_never_empty() -> None:
    assert stand_in_text("image", "", None).startswith("[image cut by scrollback slim: ")


def test_install_paths_from_the_server_stay_inside() -> None:
    import argparse

    import pytest

    from scrollback.history.v1 import history_pb2 as hpb
    from scrollback_app.cli_rescue import UnsafePathError, _destination

    args = argparse.Namespace(install=True, projects_dir="/p", output=None)
    header = hpb.SlimHeader(project_dir="proj")
    good = hpb.SlimFile(relative_path="id/subagents/agent-a.jsonl", is_subagent=True)
    assert str(_destination(args, header, good)) == "/p/proj/id/subagents/agent-a.jsonl"
    for project, relative in (("..", "x.jsonl"), ("proj", "../x.jsonl"), ("proj", "/etc/x")):
        with pytest.raises(UnsafePathError):
            _destination(
                args, hpb.SlimHeader(project_dir=project), hpb.SlimFile(relative_path=relative)
            )
