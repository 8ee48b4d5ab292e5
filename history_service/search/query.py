"""Search queries: parsing, the filters, and the two backends' query syntax.

A query is words (all must match), "quoted phrases" and prefixes (word*).
Words are runs of letters and digits, compared case-insensitively, cut as
the indexed text is cut (`search.terms`). The backends' query is rebuilt from
the parsed words, each under the tag of a project the caller may see, so no
user text ever reaches FTS5 or tsquery syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from history_service.errors import InvalidArgumentError
from history_service.search.terms import WORD, tagged

MAX_QUERY_CHARS = 1000
MAX_TERMS = 32
MAX_FILTER_VALUES = 16
MAX_FILTER_CHARS = 64
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
_PART = re.compile(r'"([^"]*)"?|(\S+)')


@dataclass(frozen=True, slots=True)
class Term:
    """One term: a word, a prefix (one word), or a phrase (several words in order)."""

    words: tuple[str, ...]
    prefix: bool = False
    # The same words lower-cased, not case-folded: the embedded index's own folding.
    lowered: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query: every term must match."""

    terms: tuple[Term, ...]

    def fts5(self, tags: Sequence[str]) -> str:
        """The FTS5 MATCH expression over the terms of the projects with these tags."""
        return " OR ".join("(" + " AND ".join(self._fts5_terms(tag)) + ")" for tag in tags)

    def _fts5_terms(self, tag: str) -> Iterator[str]:
        for term in self.terms:
            quoted = '"' + " ".join(tagged(tag, word) for word in term.words) + '"'
            yield quoted + "*" if term.prefix else quoted

    def tsquery(self, tags: Sequence[str]) -> str:
        """The PostgreSQL tsquery (input syntax, no normalization) over the same terms."""
        return " | ".join("(" + " & ".join(self._tsquery_terms(tag)) + ")" for tag in tags)

    def _tsquery_terms(self, tag: str) -> Iterator[str]:
        for term in self.terms:
            lexemes = [f"'{tagged(tag, word)}'" for word in term.words]
            if term.prefix:
                lexemes[-1] += ":*"
            yield "(" + " <-> ".join(lexemes) + ")"


def folded(words: list[str]) -> tuple[str, ...]:
    """Words case-folded, as the SQL backends index them."""
    return tuple(word.casefold() for word in words)


def lowered(words: list[str]) -> tuple[str, ...]:
    """Words lower-cased, as the embedded index's analyzer indexes them."""
    return tuple(word.lower() for word in words)


def parse_query(text: str) -> Query:
    """Parse a query; InvalidArgumentError when it is empty, too long or has no word."""
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgumentError("query is too long")
    terms: list[Term] = []
    for match in _PART.finditer(text):
        phrase, bare = match.group(1), match.group(2)
        if phrase is not None:
            found = WORD.findall(phrase)
            if found:
                terms.append(Term(folded(found), lowered=lowered(found)))
            continue
        assert bare is not None
        prefix = bare.endswith("*")
        found = WORD.findall(bare)
        if not found:
            continue
        # "foo-bar" and "foo.py" are several words: they must follow each other.
        terms.append(Term(folded(found), prefix, lowered(found)))
    if not terms:
        raise InvalidArgumentError("query has no word to search for")
    if len(terms) > MAX_TERMS:
        raise InvalidArgumentError("query has too many terms")
    return Query(tuple(terms))


@dataclass(frozen=True, slots=True)
class Filters:
    """What else a hit must satisfy (empty tuples and None: no constraint)."""

    project_dir: str = ""
    session_id: str = ""
    types: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    start_ms: int | None = None
    end_ms: int | None = None
    photos: bool | None = None


def check_values(values: list[str] | tuple[str, ...], what: str) -> tuple[str, ...]:
    """A list filter's values, bounded (InvalidArgumentError otherwise)."""
    if len(values) > MAX_FILTER_VALUES or any(len(v) > MAX_FILTER_CHARS for v in values):
        raise InvalidArgumentError(f"too many or too long {what}")
    return tuple(dict.fromkeys(v for v in values if v))


def page_size(value: int) -> int:
    """A request's page size: 0 is the default, over the cap is cut, negative refused."""
    if value < 0:
        raise InvalidArgumentError("page_size must not be negative")
    return DEFAULT_PAGE_SIZE if value == 0 else min(value, MAX_PAGE_SIZE)
