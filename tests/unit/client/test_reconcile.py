"""reconcile_pending: the one comparison of pending accepted messages with transcript entries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from client.reconcile import reconcile_pending
from scrollback.history.v1 import history_pb2 as hpb

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
_offset = 0


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def entry(
    text: Any, when: datetime | None, *, kind: str = "user", images: int = 0, **extra: Any
) -> hpb.Entry:
    """A transcript entry; byte offsets grow with every call."""
    global _offset
    content: Any = text
    if images:
        content = [{"type": "text", "text": text}] + [
            {"type": "image", "source": {"type": "base64", "data": "[x]"}} for _ in range(images)
        ]
    line: dict[str, Any] = {"type": kind, "message": {"role": kind, "content": content}, **extra}
    stamp = _stamp(when) if when else ""
    if stamp:
        line["timestamp"] = stamp
    json = orjson.dumps(line).decode()
    _offset += len(json) + 1
    return hpb.Entry(uuid=f"e{_offset}", type=kind, timestamp=stamp, byte_offset=_offset, json=json)


def pending(seq: int, text: str, when: datetime, attachments: int = 0) -> hpb.AcceptedMessage:
    message = hpb.AcceptedMessage(
        seq=seq,
        client_txn_id=f"t{seq}",
        text=text,
        attachments=[hpb.Attachment(ref="media:" + "0" * 64) for _ in range(attachments)],
    )
    message.accepted_time.FromDatetime(when)
    return message


def test_an_old_identical_message_never_retires_a_new_one() -> None:
    yesterday = entry("hi", NOW - timedelta(days=1))
    sent_now = pending(1, "hi", NOW)
    result = reconcile_pending([yesterday], [sent_now])
    assert [m.seq for m in result.pending] == [1] and not result.retired
    fresh = entry("hi", NOW + timedelta(seconds=2))
    result = reconcile_pending([yesterday, fresh], [sent_now])
    assert not result.pending
    assert [(m.seq, e.uuid) for m, e in result.retired] == [(1, fresh.uuid)]


def test_the_same_instant_is_not_after() -> None:
    same = entry("hi", NOW)
    assert reconcile_pending([same], [pending(1, "hi", NOW)]).pending


def test_each_entry_retires_at_most_one_pending() -> None:
    first, second = pending(1, "ok", NOW), pending(2, "ok", NOW + timedelta(seconds=1))
    one = entry("ok", NOW + timedelta(seconds=5))
    result = reconcile_pending([one], [first, second])
    assert [m.seq for m, _ in result.retired] == [1] and [m.seq for m in result.pending] == [2]
    two = entry("ok", NOW + timedelta(seconds=6))
    result = reconcile_pending([two, one], [second, first])
    assert sorted((m.seq, e.uuid) for m, e in result.retired) == [(1, one.uuid), (2, two.uuid)]


def test_the_match_leaves_later_entries_to_later_pending() -> None:
    early = pending(1, "go", NOW)
    late = pending(2, "go", NOW + timedelta(seconds=10))
    # the entry eligible only for the early pending is written after the one both may take
    both = entry("go", NOW + timedelta(seconds=20))
    only_early = entry("go", NOW + timedelta(seconds=5))
    result = reconcile_pending([both, only_early], [early, late])
    assert not result.pending
    assert {m.seq: e.uuid for m, e in result.retired} == {1: only_early.uuid, 2: both.uuid}


def test_text_and_attachment_count_must_match() -> None:
    after = NOW + timedelta(seconds=1)
    message = pending(1, "photo", NOW, attachments=1)
    assert reconcile_pending([entry("photo", after)], [message]).pending
    assert reconcile_pending([entry("other", after, images=1)], [message]).pending
    assert not reconcile_pending([entry(" photo\n", after, images=1)], [message]).pending


def test_only_user_messages_retire() -> None:
    after = NOW + timedelta(seconds=1)
    message = pending(1, "hi", NOW)
    tool_answer = entry([{"type": "tool_result", "content": "hi"}], after)
    assistant = entry([{"type": "text", "text": "hi"}], after, kind="assistant")
    meta = entry("hi", after, isMeta=True)
    assert reconcile_pending([tool_answer, assistant, meta], [message]).pending
    broken = hpb.Entry(type="user", json="not json", timestamp=_stamp(after), byte_offset=1)
    assert reconcile_pending([broken], [message]).pending


def test_after_offset_retires_entries_without_timestamps() -> None:
    message = pending(1, "hi", NOW)
    before = entry("hi", None)
    later = entry("hi", None)
    assert reconcile_pending([before, later], [message]).pending  # nothing proves "after"
    result = reconcile_pending([before, later], [message], after_offset=later.byte_offset)
    assert [e.uuid for _, e in result.retired] == [later.uuid]
    # an entry before the offset with an older timestamp stays ineligible
    old = entry("hi", NOW - timedelta(hours=1))
    assert reconcile_pending([old], [message], after_offset=old.byte_offset + 1).pending
