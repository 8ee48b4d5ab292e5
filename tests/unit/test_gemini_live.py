"""Gemini CLI sessions read as the lines of their live messages (scrollback.gemini_live)."""

from __future__ import annotations

import orjson
import pytest

from scrollback.contract.stripping import strip_line
from scrollback.gemini_live import PREFIX_BYTES, LiveView, checkpoint_elements
from scrollback.lineindex import LineIndex
from scrollback.memory_source import MemorySource
from scrollback.state.line_index_sqlite import SqliteLineIndexStore
from tests.support.gemini import (
    GeminiSession,
    checkpointed_session,
    full_session,
    images_of,
    inline_part,
    legacy_document,
)
from tests.support.media import png_bytes


def _view_messages(data: bytes, ino: int = 1) -> list[dict[str, object]]:
    with LiveView(MemorySource(data, ino=ino)) as view:
        size = view.stat().st_size
        text = view.read(size, 0)
    assert len(text) == size
    return [orjson.loads(line) for line in text.split(b"\n") if line.strip()]


@pytest.mark.parametrize("make", [full_session, checkpointed_session])
def test_the_view_holds_each_live_message_once_as_its_latest_version(make) -> None:
    session = make("5f0c2a1e-0000-4000-8000-000000000001")
    served = _view_messages(session.data())
    assert served == list(session.messages.values())


def test_each_live_line_of_the_view_is_the_raw_text_of_its_latest_line() -> None:
    session = full_session("s1")
    with LiveView(MemorySource(session.data(), ino=2)) as view:
        text = view.read(view.stat().st_size, 0)
    lines = [line for line in text.split(b"\n") if line.strip()]
    latest = {orjson.loads(line)["id"]: line for line in session.lines if line.startswith(b'{"id"')}
    assert lines == [latest[i] for i in session.messages]


def test_a_torn_last_line_is_not_in_the_view_until_it_is_complete() -> None:
    session = full_session("s2")
    torn = b'{"id":"u9","timestamp":"x","type":"user","content":"hal'
    source = MemorySource(session.data(torn=torn), ino=3)
    view = LiveView(source)
    assert view.stat().st_size == PREFIX_BYTES + len(session.data())
    source.append(b'f"}\n')
    messages = [orjson.loads(line) for line in view.read(10**7, 0).split(b"\n") if line.strip()]
    assert messages[-1]["id"] == "u4"  # the view grows when its stat is taken again
    view.stat()
    messages = [orjson.loads(line) for line in view.read(10**7, 0).split(b"\n") if line.strip()]
    assert messages[-1] == {"id": "u9", "timestamp": "x", "type": "user", "content": "half"}


def test_a_rewrite_keeps_the_generation_and_a_rewind_or_checkpoint_moves_it() -> None:
    session = GeminiSession("s3")
    session.user("u1", "hello")
    session.gemini("g1", "Hi")
    source = MemorySource(session.data(), ino=4)
    view = LiveView(source)
    first = view.stat()
    session.stream("g1", "Hi there")
    source.replace(session.data())
    after_rewrite = view.stat()
    assert after_rewrite.st_ino == first.st_ino and after_rewrite.st_size > first.st_size
    assert view.read(PREFIX_BYTES, 0) == b" " * (PREFIX_BYTES - 1) + b"\n"
    session.rewind("g1")
    source.replace(session.data())
    assert view.stat().st_ino != first.st_ino
    assert _view_messages(session.data(), ino=5) == list(session.messages.values())


def test_a_rewind_to_an_unknown_id_clears_every_message_as_gemini_cli_reads_it() -> None:
    session = GeminiSession("s4")
    session.user("u1", "hello")
    session.lines.append(b'{"$rewindTo":"nope"}')
    session.messages = {}
    session.user("u2", "again")
    assert [m["id"] for m in _view_messages(session.data(), ino=6)] == ["u2"]


def test_checkpoint_elements_are_found_without_parsing_their_payloads() -> None:
    element = {"id": "a", "content": [inline_part(png_bytes(5000)), {"text": 'x"]},{'}]}
    line = orjson.dumps({"$set": {"messages": [element, {"id": "b"}], "lastUpdated": "t"}})
    spans = checkpoint_elements(line, ("$set", "messages"))
    assert spans is not None
    assert [orjson.loads(line[s:e]) for s, e in spans] == [element, {"id": "b"}]
    assert checkpoint_elements(b'{"$set":{"summary":"x"}}', ("$set", "messages")) is None


def test_the_stripped_view_line_names_the_message_by_its_id_and_numbers_its_images() -> None:
    session = full_session("s5", seed=3)
    with LiveView(MemorySource(session.data(), ino=7)) as view:
        text = view.read(view.stat().st_size, 0)
    for line in (line for line in text.split(b"\n") if line.strip()):
        stripped = strip_line(line, 1024)
        assert stripped is not None
        expected = images_of(session.messages[stripped.uuid])
        assert [image.index for image in stripped.images] == list(range(len(expected)))
        assert stripped.cut_count == len(expected) and len(stripped.json) < 4096


def test_an_older_whole_document_session_is_read_as_its_messages() -> None:
    session = full_session("s6")
    document = legacy_document(session)
    with LiveView(MemorySource(document, ino=8), legacy=True) as view:
        stat = view.stat()
        text = view.read(stat.st_size, 0)
        assert view.scan.title == "what is in this photo?"
    lines = [line for line in text.split(b"\n") if line.strip()]
    assert [orjson.loads(line) for line in lines] == list(session.messages.values())
    assert all(line.startswith(b"{") for line in lines)  # each message a line of its own
    # Rewritten whole (in place): another version.
    session.user("u7", "and another")
    source = MemorySource(document, ino=9)
    view = LiveView(source, legacy=True)
    first = view.stat().st_ino
    source.replace(legacy_document(session))
    assert view.stat().st_ino != first
    assert orjson.loads(view.read(10**7, 0).split(b"\n")[-2])["id"] == "u7"


def test_the_line_index_of_a_view_survives_a_rewrite_of_its_last_message(tmp_path) -> None:
    session = GeminiSession("s7")
    for k in range(20):
        session.user(f"u{k}", f"question {k}")
        session.gemini(f"g{k}", f"answer {k}")
    source = MemorySource(session.data(), ino=10)
    index = LineIndex(SqliteLineIndexStore(tmp_path))
    try:
        view = LiveView(source)
        first = index.ensure("s7", view)
        assert index.builds == 1
        # One row per live message: the header and the `$set`s are blank, left out.
        assert len(index.lines_before(first, view.stat().st_size, 1000)) == 40
        session.stream("g19", "answer 19, streamed on")  # the last line indexed turns blank
        source.replace(session.data())
        view.stat()
        snapshot = index.ensure("s7", view)
        assert index.builds == 1  # extended, not rebuilt
        rows = index.lines_before(snapshot, view.stat().st_size, 1000)  # newest first
        lines = [view.read(length, offset) for offset, length in reversed(rows)]
        live = [orjson.loads(line) for line in lines if line.strip()]
        assert live[-1]["content"] == "answer 19, streamed on"
        assert [m["id"] for m in live] == list(session.messages)[-len(live) :]
    finally:
        index.close()
