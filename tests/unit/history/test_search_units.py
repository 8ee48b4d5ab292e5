"""The pure parts of search: query parsing, text extraction, snippets, keys; and the corpus.

The corpus test indexes every real transcript under tests/corpus into a real
SQLite index and checks that no base64 payload of theirs is ever in the text
the index holds, and that words the people wrote are found.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from history_service.errors import InvalidArgumentError
from history_service.search.embedded import TantivySearchIndex
from history_service.search.indexer import SearchIndexer
from history_service.search.query import Filters, Term, parse_query
from history_service.search.snippet import make_snippet
from history_service.search.store import Order, Page, entry_key, timestamp_ms
from history_service.search.terms import WORD, index_words
from history_service.search.text import entry_text
from scrollback.contract.marker import STRIPPED_MEDIA_MARKER
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line
from scrollback.directory import DirectoryRoot

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def test_parse_query_words_phrases_prefixes() -> None:
    query = parse_query('Foo "Bar  baz" qu* history_service/tokens.py')
    assert query.terms == (
        Term(("foo",), lowered=("foo",)),
        Term(("bar", "baz"), lowered=("bar", "baz")),
        Term(("qu",), prefix=True, lowered=("qu",)),
        Term(
            ("history", "service", "tokens", "py"), lowered=("history", "service", "tokens", "py")
        ),
    )
    # Case-folded for the SQL backends, lower-cased as Tantivy's analyzer does.
    (street,) = parse_query("Straße").terms
    assert (street.words, street.lowered) == (("strasse",), ("straße",))
    # Each word under each visible project's tag; an entry matches within its one project.
    assert query.fts5(["pa", "pb"]) == (
        '("pafoo" AND "pabar pabaz" AND "paqu"* AND "pahistory paservice patokens papy")'
        ' OR ("pbfoo" AND "pbbar pbbaz" AND "pbqu"* AND "pbhistory pbservice pbtokens pbpy")'
    )
    assert query.tsquery(["pa"]) == (
        "(('pafoo') & ('pabar' <-> 'pabaz') & ('paqu':*)"
        " & ('pahistory' <-> 'paservice' <-> 'patokens' <-> 'papy'))"
    )
    # Nothing of the user's text reaches either syntax but the words.
    hostile = parse_query('"a" OR b\' NEAR(c) {d}:* ^e')
    assert all(re.fullmatch(r"[^\W_]+", w) for t in hostile.terms for w in t.words)


@pytest.mark.parametrize("text", ["", "   ", '""', "*** !!!", "x" * 1001])
def test_parse_query_refuses(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_query(text)


def test_entry_text_keeps_what_people_read() -> None:
    payload = base64.b64encode(bytes(range(256)) * 20).decode()
    short = "QUJD" * 60  # a 240-character base64 run: under the inline limit
    line = orjson.dumps(
        {
            "type": "assistant",
            "uuid": "u1",
            "timestamp": "2025-01-01T00:00:00Z",
            "sessionId": "envelope-session",
            "message": {
                "role": "assistant",
                "model": "claude-envelope",
                "content": [
                    {"type": "thinking", "thinking": "pondering"},
                    {"type": "text", "text": "visible words"},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": "ls -la"},
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "text", "text": "result text " + short},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": payload,
                                },
                            },
                        ],
                    },
                ],
            },
        }
    )
    stripped = strip_line(line, MIN_INLINE_LIMIT)
    assert stripped is not None
    found = entry_text(stripped)
    assert found is not None
    assert found.role == "assistant" and found.has_photos and found.uuid == "u1"
    for word in ("pondering", "visible words", "Bash", "ls -la", "result text"):
        assert word in found.text
    for absent in ("envelope", "sessionId", "t1", "image/png", short, payload[:40]):
        assert absent not in found.text
    assert STRIPPED_MEDIA_MARKER not in found.text


def _text_of(text: str) -> str:
    """The indexed text of a user entry whose message is `text`."""
    stripped = strip_line(
        orjson.dumps({"type": "user", "uuid": "u", "message": {"role": "user", "content": text}})
    )
    assert stripped is not None
    found = entry_text(stripped)
    return found.text if found is not None else ""


def _wrapped(data: bytes, width: int, newline: str = "\n") -> str:
    flat = base64.b64encode(data).decode()
    return newline.join(flat[i : i + width] for i in range(0, len(flat), width))


@pytest.mark.parametrize(
    ("width", "newline", "indent"),
    [(76, "\n", ""), (76, "\r\n", ""), (64, "\n", ""), (64, "\n", "    "), (60, "\r\n", "\t")],
)
def test_wrapped_base64_lines_are_a_payload(width: int, newline: str, indent: str) -> None:
    # MIME (76), PEM (64) and others: no piece of the run is kept, the words around it are.
    for size in (90, 100, 400, 5000):  # two full lines and a short last one, up to many
        data = os.urandom(size)
        body = newline.join(indent + part for part in _wrapped(data, width).split("\n"))
        text = _text_of(f"Here is the key:{newline}{body}{newline}Thanks, that is all")
        assert "Here is the key" in text and "Thanks, that is all" in text
        flat = base64.b64encode(data).decode()
        for start in range(0, len(flat) - 8, 7):
            assert flat[start : start + 8] not in text, (size, start)


@pytest.mark.parametrize(
    "text",
    [
        "-" * 76 + "\n" + "-" * 76 + "\n" + "=" * 76,  # rules
        "\n".join(os.urandom(32).hex() for _ in range(6)),  # sha256 sums
        "\n".join(os.urandom(40).hex().upper() for _ in range(4)),  # a hex dump
        "A single line of base64: " + base64.b64encode(os.urandom(100)).decode(),
        "two words\n" + "x" * 59 + "\n" + "y" * 59 + "\nend",  # under a full line
        "The quick brown fox jumps over the lazy dog, again and again and again and again.\n"
        "Then it rests, which a fox of its age had earned after all that jumping about.",
        "aVeryLongIdentifierThatGoesOnAndOnForSixtyCharactersOrMoreSoThere()\n"
        "anotherVeryLongIdentifierThatGoesOnForSixtyCharactersOrMoreToo.x",
    ],
)
def test_text_that_is_not_wrapped_base64_is_kept(text: str) -> None:
    assert _text_of(text) == text.strip()


_PROSE_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789", min_size=1, max_size=12)
_PROSE_LINE = st.lists(_PROSE_WORD, min_size=1, max_size=20).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(_PROSE_LINE, max_size=4),
    after=st.lists(_PROSE_LINE, max_size=4),
    data=st.binary(min_size=90, max_size=3000),
    width=st.sampled_from([60, 64, 72, 76]),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_prose_stays_and_wrapped_base64_goes(
    before: list[str], after: list[str], data: bytes, width: int, newline: str
) -> None:
    prose_before, prose_after = newline.join(before), newline.join(after)
    text = _text_of(newline.join([prose_before, _wrapped(data, width, newline), prose_after]))
    for line in before + after:
        assert line in text  # prose lines (spaces between words) are never a payload
    flat = base64.b64encode(data).decode()
    # Of the payload, at most a short last line (under 16 characters, unpadded) may stay.
    kept = [flat[i : i + 16] for i in range(0, len(flat) - 16) if flat[i : i + 16] in text]
    assert kept == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_index_words_are_the_query_parsers_words(text: str) -> None:
    # Indexed and asked for alike: the same words as parse_query cuts, case-folded.
    assert index_words(text) == [word.casefold() for word in WORD.findall(text)]
    for word in WORD.findall(text):
        (term,) = parse_query(word).terms
        assert term.words == (word.casefold(),)


def test_summary_and_empty_entries() -> None:
    summary = strip_line(orjson.dumps({"type": "summary", "summary": "A title", "leafUuid": "x"}))
    assert summary is not None and (found := entry_text(summary)) is not None
    assert found.text == "A title" and found.type == "summary"
    bare = strip_line(orjson.dumps({"type": "user", "message": {"content": []}}))
    assert bare is not None and entry_text(bare) is None


def test_snippet_marks_each_hit_word() -> None:
    text = " ".join(f"w{i}" for i in range(40)) + "\n  the Ripe   banana  " + "tail " * 30
    snippet = make_snippet(text, parse_query('"ripe banana"'))
    marked = [snippet.text[a:b] for a, b in snippet.highlights]
    assert marked == ["Ripe", "banana"]
    assert snippet.text.startswith("…") and snippet.text.endswith("…")
    assert "\n" not in snippet.text


def test_keys_order_by_time_and_timestamps_parse() -> None:
    assert timestamp_ms("2025-01-01T00:00:00.250Z") == 1735689600250
    assert timestamp_ms("yesterday") is None and timestamp_ms("2025-01-01T00:00:00") is None
    early = entry_key("p/s.jsonl", 999_999, timestamp_ms("2025-01-01T00:00:00Z"))
    late = entry_key("p/s.jsonl", 0, timestamp_ms("2025-01-01T00:00:00.001Z"))
    assert early < late
    assert entry_key("p/s.jsonl", 5, None) < early


def test_corpus_is_indexed_without_payloads(tmp_path: Path) -> None:
    # Copies under names that are session ids (`<root>/<project>/<id>.jsonl`).
    root = tmp_path / "root"
    nonempty = 0
    for number, path in enumerate(sorted(CORPUS.rglob("*.jsonl"))):
        project = root / path.parent.name.replace(".", "-")
        project.mkdir(parents=True, exist_ok=True)
        (project / f"s{number}.jsonl").write_bytes(path.read_bytes())
        nonempty += path.stat().st_size > 0
    index = TantivySearchIndex(tmp_path / "state")
    try:
        indexer = SearchIndexer(DirectoryRoot(root), index, max_line_size=16 * 1024 * 1024)
        indexer.catch_up()
        assert indexer.stats.files_indexed == nonempty and indexer.stats.entries > 2000
        # Every base64 image payload of the corpus: no 32-character piece of it is held.
        pieces = set()
        for path in CORPUS.rglob("*.jsonl"):
            for match in re.finditer(rb'"data":\s*"([A-Za-z0-9+/=]{2000,})"', path.read_bytes()):
                pieces.add(match.group(1)[1000:1032].decode())
        assert pieces, "the corpus has images"
        bodies = [str(doc["body"]) for doc in index.stored_entries()]
        assert len(bodies) == indexer.stats.entries
        assert not any(piece in body for body in bodies for piece in pieces)
        assert not any('"type":' in body and '"uuid":' in body for body in bodies)
        # A second pass over unchanged files reads nothing.
        read = indexer.stats.bytes_read
        indexer.catch_up()
        assert indexer.stats.bytes_read == read
        hits = index.search(parse_query("the"), Filters(), None, Page(Order.NEWEST), 5)
        assert len(hits) == 5 and [h.key for h in hits] == sorted(
            (h.key for h in hits), reverse=True
        )
    finally:
        index.close()
