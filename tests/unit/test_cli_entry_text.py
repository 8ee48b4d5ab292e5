"""The CLI's one-line text of Codex rollout and opencode entries (`scrollback window`, `tail`)."""

from __future__ import annotations

from pathlib import Path

import orjson

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.opencode.source import OpencodeSource
from scrollback_app.cli_client import entry_text
from tests.support.codex import ENCRYPTED, Rollout, full_rollout
from tests.support.opencode import write_sample


def _entries(rollout: Rollout) -> list[hpb.Entry]:
    entries = []
    for line in rollout.lines:
        try:
            kind = orjson.loads(line)["type"]
        except orjson.JSONDecodeError:
            continue  # the torn line: never served
        entries.append(hpb.Entry(type=kind, json=line.decode()))
    return entries


def test_rollout_entries_read_as_labelled_text() -> None:
    texts = [entry_text(e) for e in _entries(full_rollout("s"))]
    assert texts[0].startswith("[session_meta] /home/dev/project-x")
    assert texts[1] == "[turn_context] gpt-5"
    assert "[user] please look at the flamingo screenshot [input_image] [input_image]" in texts
    assert "[reasoning] Considering the pelican layout" in texts
    assert any(t.startswith("[function_call shell]") and "view_image" in t for t in texts)
    assert "[output] captured the heron window [input_image]" in texts
    assert "[assistant] The albatross button is misaligned." in texts
    assert "[x_future_kind]" in texts
    assert "[compacted] summary of the earlier turns" in texts
    assert not any(ENCRYPTED[:40] in t for t in texts)


def test_opencode_messages_read_as_labelled_text(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "opencode.db")
    source = OpencodeSource(sample.db.path)
    with source.open(source.resolve(sample.session, None)) as view:
        lines = view.read(view.stat().st_size, 0).splitlines()
    texts = [entry_text(hpb.Entry(type="opencode", json=line.decode())) for line in lines]
    assert texts[0] == "[user] the login button is broken, see the screenshot [file paste-0.png]"
    assert texts[1] == (
        "[assistant] [reasoning] The button handler [tool read] export function login() {} "
        "[patch] [agent] [subtask] auth Fixed the handler."
    )
    assert texts[2] == "[user] thanks; compact now [compaction]"
    assert not any("base64" in t or "4b825dc6" in t for t in texts)
