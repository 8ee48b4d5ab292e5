"""The CLI's one-line text of Codex rollout and opencode entries (`scrollback window`, `tail`): read as
Claude Code's are, each message once."""

from __future__ import annotations

from pathlib import Path

import orjson

from scrollback.history.v1 import history_pb2 as hpb
from scrollback.opencode.source import OpencodeSource
from scrollback_app.cli_entries import entry_text, shown, shown_type
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


def test_rollout_entries_read_as_claude_code_entries_do() -> None:
    rows = [(shown_type(e), entry_text(e)) for e in _entries(full_rollout("s")) if shown(e)]
    texts = [text for _, text in rows]
    assert rows[0] == ("session", "[session_meta] /home/dev/project-x")
    assert ("user", "please look at the flamingo screenshot [image] [image]") in rows
    assert ("assistant", "[thinking] Considering the pelican layout") in rows
    # A shell call shows its script, not its JSON arguments.
    assert ("assistant", "[tool_use shell] view_image shot.png") in rows
    assert ("user", "[tool_result] captured the heron window [image]") in rows
    assert ("assistant", "The albatross button is misaligned.") in rows
    assert "[x_future_kind]" in texts
    assert ("summary", "[compacted] summary of the earlier turns") in rows
    assert not any(ENCRYPTED[:40] in t for t in texts)
    # The event copies of messages and the token counts are not shown: each message once.
    assert not any("token_count" in t or t.startswith("[event") for t in texts), texts
    assert sum("flamingo screenshot" in t for t in texts) == 1
    assert not any(t.startswith("[turn_context]") for t in texts)


def test_a_patch_shows_its_files_and_a_wrapped_output_its_text() -> None:
    rollout = Rollout("p")
    rollout.apply_patch(
        "c1", "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch\n", "Done!"
    )
    rollout.tool_call("c2", "ls -la", "", [])
    texts = [entry_text(e) for e in _entries(rollout)]
    assert texts[0] == "[tool_use apply_patch] src/app.py"
    assert texts[1] == "[tool_result] Done!"
    assert texts[2] == "[tool_use shell] ls -la"


def test_other_events_are_shown() -> None:
    rollout = Rollout("e")
    rollout.add("event_msg", {"type": "error", "message": "stream disconnected"})
    (entry,) = _entries(rollout)
    assert shown(entry) and shown_type(entry) == "event"
    assert entry_text(entry) == "[event error] stream disconnected"


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
