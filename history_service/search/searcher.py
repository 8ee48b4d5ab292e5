"""Answering a search for one caller: visibility, paging and jump-to-message tokens.

Visibility is ReadWindow's: the index is asked only for the caller's
projects, and each hit's session is then resolved through TranscriptSource for
that caller, as ReadWindow resolves it, so a hidden, vanished or ambiguous
session never yields a hit; a hit names its session as the caller's listing
does (`TranscriptSource.name_of`). Each hit's file is checked against the identity
it was indexed under (a rewritten file not yet re-indexed yields no stale
hit), and its `window_page_token` is a latest-first ReadWindow page token
whose boundary is the end of the hit's line: that window ends with the hit.
A search's first page fixes its watermark (now): its later pages serve only
entries indexed by then, so new entries do not shift them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from history_service.errors import FileRewrittenError
from history_service.search.indexer import identity_at
from history_service.search.query import Filters, Query
from history_service.search.snippet import Snippet, make_snippet
from history_service.search.store import IndexHit, Order, Page, SearchIndex
from history_service.tokens import DIRECTION_LATEST_FIRST, PageToken, TokenCodec
from history_service.windows import open_transcript
from scrollback.linefile import FileIdentity
from scrollback.principals import ALL_PROJECTS, Principal, namespace
from scrollback.transcripts import TranscriptSource

# Rounds of asking the index again when hits were dropped (hidden or stale).
_MAX_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One hit as served."""

    session_id: str
    project_dir: str
    entry_uuid: str
    type: str
    role: str
    timestamp: str
    byte_offset: int
    snippet: Snippet
    has_photos: bool
    window_page_token: str


@dataclass(frozen=True, slots=True)
class SearchPage:
    """One page of hits and the token of the next page ("" at the end)."""

    hits: list[SearchHit]
    next_page_token: str
    partial: bool = False


class Searcher:
    """Searches one index for callers of one transcript root."""

    def __init__(self, root: TranscriptSource, index: SearchIndex, codec: TokenCodec) -> None:
        self._root = root
        self._index = index
        self._codec = codec

    def search(
        self,
        principal: Principal | None,
        query: Query,
        filters: Filters,
        page_size: int,
        page_token: str,
        order: Order = Order.RELEVANCE,
    ) -> SearchPage:
        """One page of hits in `order` (blocking; domain errors as ReadWindow's)."""
        scope = "search:" + namespace(principal)
        if page_token:
            page = self._codec.parse_search_token(scope, page_token, order)
        else:
            page = Page(order, watermark=time.time_ns() // 1000)
        if filters.session_id:
            # NOT_FOUND / FAILED_PRECONDITION exactly as ReadWindow answers them; the
            # index names a session by its unique id (TranscriptFile.unique_id).
            named = self._root.resolve(filters.session_id, principal)
            filters = dataclasses.replace(filters, session_id=named.unique_id)
        projects = None
        if principal is not None and ALL_PROJECTS not in principal.projects:
            projects = frozenset(principal.projects)
        hits: list[SearchHit] = []
        more = False
        for _ in range(_MAX_ROUNDS):
            want = page_size - len(hits)
            rows = self._index.search(query, filters, projects, page, want + 1)
            more = len(rows) > want
            for row in rows[:want]:
                page = page.after(row)
                hit = self._hit(principal, query, row)
                if hit is not None:
                    hits.append(hit)
            if not more or len(hits) >= page_size:
                break
        token = self._codec.search_token(scope, page) if more else ""
        return SearchPage(hits, token, partial=not self._index.complete())

    def _hit(self, principal: Principal | None, query: Query, row: IndexHit) -> SearchHit | None:
        try:
            transcript = self._root.resolve(row.session_id, principal)  # a unique id: one source
        except (LookupError, ValueError):
            return None
        name = self._root.name_of(transcript, principal)
        if transcript.project_dir != row.project_dir:
            return None
        try:
            fd = open_transcript(self._root, transcript)
        except (LookupError, OSError):
            return None
        try:
            identity_at(row.identity, row.line_end).check(fd, row.line_end, self._root.version)
            current = FileIdentity.of(fd, self._root.version)
            mark = PageToken.at(DIRECTION_LATEST_FIRST, current, row.line_end, fd)
        except (FileRewrittenError, OSError, ValueError):
            return None
        finally:
            fd.close()
        return SearchHit(
            session_id=name,
            project_dir=row.project_dir,
            entry_uuid=row.uuid,
            type=row.type,
            role=row.role,
            timestamp=row.timestamp,
            byte_offset=row.offset,
            snippet=make_snippet(row.text, query),
            has_photos=row.has_photos,
            window_page_token=self._codec.page_token(name, mark),
        )
