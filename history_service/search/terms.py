"""Index terms: every word of an entry's text under its project's tag, for both backends.

The index never holds a bare word. Each word is stored as the tag of the
entry's project followed by the word (`p` and 12 hex digits of a hash of the
project dir, then the word, case-folded), and a query asks only for the
tagged words of the projects the caller may see. So a word's list of entries
in the index is already one project's list: a search reads nothing of another
project's entries, and its cost depends only on what the caller may see, not
on how often a word occurs where they cannot look (two projects whose tags
clashed would share lists; their hits are still told apart by project). Each
word is stored once more under `ALL_TAG` (`g`) for callers who see every
project (the loopback default): one list per word for them, not one per
project.

Words are runs of letters and digits (`WORD`), case-folded, cut the same way
in the indexed text and in a query (`query.parse_query`), so both backends
match the same words. Words are cut to `MAX_WORD_CHARS` on both sides
(PostgreSQL refuses long lexemes): a longer word matches the words that begin
alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import xxhash

WORD = re.compile(r"[^\W_]+")
TAG_DIGITS = 12
MAX_WORD_CHARS = 256
ALL_TAG = "g"
# Every ASCII character but letters and digits, as a space.
_ASCII_SPACES = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalnum()})


def project_tag(project_dir: str) -> str:
    """The prefix of a project's terms: letters and digits of one fixed length."""
    return "p" + xxhash.xxh3_64_hexdigest(project_dir.encode())[:TAG_DIGITS]


def tagged(tag: str, word: str) -> str:
    """One term: a (case-folded) word under a tag."""
    return tag + word[:MAX_WORD_CHARS]


def index_words(text: str) -> list[str]:
    """The case-folded words of an entry's text, in order, cut to MAX_WORD_CHARS."""
    if text.isascii():
        # The common case in C: the same words as WORD finds, lower case is the folding.
        words = text.translate(_ASCII_SPACES).lower().split()
    else:
        found = WORD.findall(text)
        # Case folding maps each character on its own: one call for all the words.
        words = " ".join(found).casefold().split(" ") if found else []
    if words and max(map(len, words)) > MAX_WORD_CHARS:
        words = [word[:MAX_WORD_CHARS] for word in words]
    return words


def under(tag: str, words: list[str]) -> list[str]:
    """The terms of some words under one tag."""
    return [tag + word for word in words]


def joined(tag: str, words: list[str]) -> str:
    """The terms of some words under one tag, space-separated."""
    return tag + (" " + tag).join(words) if words else ""


def scope_tags(projects: Iterable[str] | None) -> list[str]:
    """The tags a search asks for: its projects' (None: every project's, ALL_TAG)."""
    if projects is None:
        return [ALL_TAG]
    return sorted({project_tag(project) for project in projects})
