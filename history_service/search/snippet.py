"""Snippets: a short excerpt of an entry's text around its first hit, hits marked.

Made here, not by the database, so both backends give the same snippet for
the same text and query (FTS5's `snippet` and PostgreSQL's `ts_headline` tokenize
differently). Offsets are in code points of the excerpt.
"""

from __future__ import annotations

from dataclasses import dataclass

from history_service.search.query import Query
from history_service.search.terms import WORD

CONTEXT_WORDS = 10
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Snippet:
    """An excerpt and the (start, end) of each highlighted word in it."""

    text: str
    highlights: tuple[tuple[int, int], ...]


def _matched(words: list[str], query: Query) -> set[int]:
    hit: set[int] = set()
    for term in query.terms:
        size = len(term.words)
        for i in range(len(words) - size + 1):
            if all(
                words[i + k] == term.words[k]
                or (term.prefix and k == size - 1 and words[i + k].startswith(term.words[k]))
                for k in range(size)
            ):
                hit.update(range(i, i + size))
    return hit


def make_snippet(text: str, query: Query, context_words: int = CONTEXT_WORDS) -> Snippet:
    """The excerpt around the first hit (the text's start when nothing matches)."""
    spans = [(m.start(), m.end()) for m in WORD.finditer(text)]
    words = [text[a:b].casefold() for a, b in spans]
    hits = _matched(words, query)
    if not spans:
        return Snippet(text[:200], ())
    first = min(hits) if hits else 0
    low = max(0, first - context_words)
    high = min(len(spans), first + 2 * context_words + 1)
    start = spans[low][0]
    end = spans[high - 1][1]
    body = " ".join(text[start:end].split())  # one line, runs of space folded
    # Folding spaces moves offsets: locate each hit word again in the folded body.
    highlights: list[tuple[int, int]] = []
    cursor = 0
    lead = ELLIPSIS if low > 0 else ""
    for index in range(low, high):
        word = text[spans[index][0] : spans[index][1]]
        at = body.find(word, cursor)
        if at < 0:
            continue
        cursor = at + len(word)
        if index in hits:
            highlights.append((len(lead) + at, len(lead) + cursor))
    tail = ELLIPSIS if high < len(spans) else ""
    return Snippet(lead + body + tail, tuple(highlights))
