"""The embedded search index: Tantivy, one index per project under `<state>/search/`.

An index per project, not one index with a project term, keeps the rule that
a search costs a caller only what it may see: a project's index holds only
its entries, so a scoped search reads, and its BM25 statistics count, only
the visible projects' data, and a word frequent in a hidden project costs
what an absent word does (with one shared index, the conjunction with a
project term still walks the hidden project's postings). A caller who sees
several projects gets each project's best hits, merged.

Each project's index holds two kinds of document: entries (`kind` "e": place,
filters, the text as `body` and a prompt's text again as `prompt`) and one
state per file (`kind` "f": path key, identity, progress). A batch's entries
and its file's new progress go in the same commit, so after a crash the
index and the progress agree and indexing resumes where the last commit
stopped.

Tantivy allows one writer per index at a time (a lock file, released when
its process dies): a process that cannot take a project's lock leaves that
project to the process holding it (`LookupError`: the indexer skips the file
this pass). Writes commit when `COMMIT_BYTES` of text wait, `COMMIT_SECONDS`
after the first uncommitted one, and at the end of each pass (`flush`).
Readers reload before each search, so a search sees every commit of every
process.

At open, the SQLite FTS5 file of earlier versions is deleted, and so is an
index directory of another `FORMAT`; the indexer builds it again in the
background, and `complete` is False (searches say partial) until a pass has
covered the whole root.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import tantivy
import xxhash

from history_service.search.query import Filters, Query, Term
from history_service.search.store import (
    EntryRow,
    FileState,
    IndexHit,
    Order,
    Page,
    entry_key,
    project_scope,
)
from history_service.search.terms import MAX_WORD_CHARS

DIR_NAME = "search"
OLD_FILE_NAME = "search.sqlite"
FORMAT = "tantivy-2"
WORDS = "words"
MAX_INDEXED_BYTES = 4096
# A word in a prompt or a title counts this many times the same word in other text.
PROMPT_BOOST = 3.0
COMMIT_BYTES = 64 * 1024 * 1024
COMMIT_SECONDS = 10.0
MAX_WRITERS = 1
# Hits asked for past a relevance page (see `_candidates`).
TIE_SLACK = 64
WRITER_HEAP = 48 * 1024 * 1024
# Tantivy wants at least 15 MB of the heap per indexing thread.
_THREAD_HEAP = 24 * 1024 * 1024
_ENTRY, _FILE = "e", "f"


def _schema() -> tantivy.Schema:
    # Filters are indexed raw terms or fast columns; what a hit shows is one stored
    # JSON value (`meta`) and the stored text: no term or column nothing asks for.
    builder = tantivy.SchemaBuilder()
    for name in ("kind", "path", "project", "session", "type", "role"):
        builder.add_text_field(name, tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("photos", indexed=True)
    for name in ("key", "ts", "seq"):
        builder.add_integer_field(name, fast=True)
    builder.add_bytes_field("meta", stored=True)
    builder.add_text_field("body", stored=True, tokenizer_name=WORDS)
    builder.add_text_field("prompt", tokenizer_name=WORDS)
    return builder.build()


SCHEMA = _schema()
# Runs of letters and digits, lower-cased: the words `search.terms` cuts.
ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.lowercase())
    # Longer words (in bytes) are not indexed: no text people read has them.
    .filter(tantivy.Filter.remove_long(MAX_INDEXED_BYTES))
    .build()
)


def project_name(project_dir: str) -> str:
    """A project's index directory name: a hash of its project dir."""
    return "p" + xxhash.xxh3_128_hexdigest(project_dir.encode())


def file_id_of(path_key: str) -> int:
    """A file's id: a hash of its path key (positive int64)."""
    return xxhash.xxh3_64_intdigest(path_key.encode()) >> 1


def _term(field: str, value: object) -> tantivy.Query:
    return tantivy.Query.term_query(SCHEMA, field, value, index_option="basic")


def _filter(query: tantivy.Query) -> tuple[tantivy.Occur, tantivy.Query]:
    """A clause that must match and adds nothing to the score."""
    return tantivy.Occur.Must, tantivy.Query.const_score_query(query, 0.0)


def _words_query(field: str, term: Term) -> tantivy.Query:
    words = list(term.lowered or term.words)
    if len(words) == 1 and (term.prefix or len(words[0]) > MAX_WORD_CHARS):
        # A word longer than MAX_WORD_CHARS matches the words that begin alike, as the
        # SQL backends cut both sides.
        return tantivy.Query.regex_query(SCHEMA, field, words[0][:MAX_WORD_CHARS] + ".*")
    if term.prefix:
        return tantivy.Query.phrase_prefix_query(SCHEMA, field, list(words))
    if len(words) == 1:
        return tantivy.Query.term_query(SCHEMA, field, words[0])
    return tantivy.Query.phrase_query(SCHEMA, field, list(words))


def tantivy_query(query: Query, filters: Filters, page: Page) -> tantivy.Query:
    """The query over one project's index: every term (in the body, or weighted more in a
    prompt), the filters, and where the page starts."""
    clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
    for term in query.terms:
        either = [
            (tantivy.Occur.Should, _words_query("body", term)),
            (
                tantivy.Occur.Should,
                tantivy.Query.boost_query(_words_query("prompt", term), PROMPT_BOOST),
            ),
        ]
        clauses.append((tantivy.Occur.Must, tantivy.Query.boolean_query(either)))
    if filters.project_dir:
        clauses.append(_filter(_term("project", filters.project_dir)))
    if filters.session_id:
        clauses.append(_filter(_term("session", filters.session_id)))
    for field, values in (("type", filters.types), ("role", filters.roles)):
        if values:
            clauses.append(_filter(tantivy.Query.term_set_query(SCHEMA, field, list(values))))
    if filters.photos is not None:
        clauses.append(_filter(_term("photos", int(filters.photos))))
    if filters.start_ms is not None or filters.end_ms is not None:
        clauses.append(_filter(_range("ts", filters.start_ms, filters.end_ms)))
    if page.watermark is not None:
        clauses.append(_filter(_range("seq", None, page.watermark + 1)))
    if page.order == Order.NEWEST and page.before_key is not None:
        clauses.append(_filter(_range("key", None, page.before_key)))
    return tantivy.Query.boolean_query(clauses)


def _range(field: str, low: int | None, high: int | None) -> tantivy.Query:
    """low <= field < high (None: unbounded)."""
    return tantivy.Query.range_query(
        SCHEMA, field, tantivy.FieldType.Integer, low, high, include_upper=high is None
    )


def _state_doc(state: FileState) -> tantivy.Document:
    meta = {
        "path": state.path_key,
        "project": state.project_dir,
        "session": state.session_id,
        "identity": state.identity,
        "indexed_to": state.indexed_to,
    }
    return tantivy.Document(kind=_FILE, path=state.path_key, meta=orjson.dumps(meta))


def _entry_doc(state: FileState, row: EntryRow, key: int, seq: int) -> tantivy.Document:
    meta = {
        "path": state.path_key,
        "project": state.project_dir,
        "session": state.session_id,
        "identity": state.identity,
        "uuid": row.uuid,
        "type": row.type,
        "role": row.role,
        "timestamp": row.timestamp,
        "offset": row.offset,
        "line_end": row.line_end,
        "photos": row.has_photos,
        "key": key,
    }
    doc = tantivy.Document(
        kind=_ENTRY,
        path=state.path_key,
        project=state.project_dir,
        session=state.session_id,
        type=row.type,
        role=row.role,
        photos=int(row.has_photos),
        key=key,
        seq=seq,
        meta=orjson.dumps(meta),
        body=row.text,
    )
    if row.ts_ms is not None:
        doc.add_integer("ts", row.ts_ms)
    if row.prompt:
        doc.add_text("prompt", row.prompt)
    return doc


def stored(doc: tantivy.Document) -> dict[str, Any]:
    """A document's stored values: its `meta` and, for an entry, its text as `body`."""
    meta = doc.get_first("meta")
    values: dict[str, Any] = orjson.loads(meta) if isinstance(meta, bytes) else {}
    body = doc.get_first("body")
    if body is not None:
        values["body"] = body
    return values


def _hit(doc: tantivy.Document) -> IndexHit:
    values = stored(doc)
    path = str(values.get("path", ""))
    return IndexHit(
        key=int(values.get("key", 0)),
        file_id=file_id_of(path),
        identity=str(values.get("identity", "")),
        project_dir=str(values.get("project", "")),
        session_id=str(values.get("session", "")),
        offset=int(values.get("offset", 0)),
        line_end=int(values.get("line_end", 0)),
        uuid=str(values.get("uuid", "")),
        type=str(values.get("type", "")),
        role=str(values.get("role", "")),
        timestamp=str(values.get("timestamp", "")),
        has_photos=bool(values.get("photos", False)),
        text=str(values.get("body", "")),
    )


class _Project:
    """One project's index, and its writer while this process holds it."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.index = tantivy.Index(SCHEMA, str(path), reuse=True)
        self.index.register_tokenizer(WORDS, ANALYZER)
        self.index.config_reader("manual")
        self.writer: tantivy.IndexWriter | None = None
        # While the writer is held: every file's state, uncommitted changes included.
        self.files: dict[str, FileState] = {}
        self.pending_bytes = 0
        self.first_pending: float | None = None
        # The keys given since the last commit: a clash within them is moved on (a clash
        # with a committed key is left: paging newest first may then serve one of the two).
        self.keys: set[int] = set()
        self.used = 0.0
        # The committed states as last read, and the meta file they were read under.
        self.read_files: dict[str, FileState] = {}
        self.read_under: tuple[int, int, int] | None = None
        self.reader_under: tuple[int, int, int] | None = None

    def _commit_mark(self) -> tuple[int, int, int]:
        """Which commit the index is at: its meta file (replaced by each commit) as stat sees it."""
        try:
            meta = (self.path / "meta.json").stat()
        except FileNotFoundError:
            return (0, 0, 0)
        return (meta.st_ino, meta.st_size, meta.st_mtime_ns)

    def searcher(self) -> tantivy.Searcher:
        """A searcher of the latest commit (of any process); reloaded only after one."""
        mark = self._commit_mark()
        if mark != self.reader_under:
            self.index.reload()
            self.reader_under = mark
        return self.index.searcher()

    def committed_files(self) -> dict[str, FileState]:
        """Every file's state as committed (read again only when a commit happened)."""
        under = self._commit_mark()
        if under == self.read_under:
            return self.read_files
        searcher = self.searcher()
        found: dict[str, FileState] = {}
        limit = max(1, searcher.num_docs)
        for _, address in searcher.search(_term("kind", _FILE), limit, count=False).hits:
            values = stored(searcher.doc(address))
            path = str(values.get("path", ""))
            found[path] = FileState(
                file_id=file_id_of(path),
                path_key=path,
                project_dir=str(values.get("project", "")),
                session_id=str(values.get("session", "")),
                identity=str(values.get("identity", "")),
                indexed_to=int(values.get("indexed_to", 0)),
            )
        self.read_files, self.read_under = found, under
        return found

    def commit(self) -> None:
        if self.writer is not None and self.first_pending is not None:
            self.writer.commit()
        self.pending_bytes, self.first_pending = 0, None
        self.keys.clear()

    def release(self) -> None:
        """Commit, and give the writer (and its lock) up."""
        if self.writer is None:
            return
        self.commit()
        writer, self.writer = self.writer, None
        writer.wait_merging_threads()
        self.files = {}


class TantivySearchIndex:
    """SearchIndex over Tantivy (see the module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self._root = state_dir / DIR_NAME
        _migrate(state_dir, self._root)
        self._lock = threading.RLock()
        self._projects: dict[str, _Project] = {}
        # Where each indexed file lives (project index name), as the last `files` saw.
        self._where: dict[str, str] = {}
        self._ids: dict[int, tuple[str, str]] = {}

    def _project(self, name: str) -> _Project:
        with self._lock:
            project = self._projects.get(name)
            if project is None:
                project = self._projects[name] = _Project(self._root / name)
            return project

    def _names(self) -> list[str]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(e.name for e in os.scandir(self._root) if e.is_dir())
        return []

    def _writable(self, name: str) -> _Project:
        """The project with its writer held; LookupError if another process holds it."""
        project = self._project(name)
        project.used = time.monotonic()
        if project.writer is not None:
            return project
        held = [p for p in self._projects.values() if p.writer is not None]
        if len(held) >= MAX_WRITERS:
            min(held, key=lambda p: p.used).release()
        threads = max(1, min(os.cpu_count() or 1, WRITER_HEAP // _THREAD_HEAP))
        try:
            project.writer = project.index.writer(WRITER_HEAP, threads)
        except ValueError:
            raise LookupError("another process indexes this project") from None
        project.files = dict(project.committed_files())
        return project

    def files(self) -> dict[str, FileState]:
        with self._lock:
            found: dict[str, FileState] = {}
            for name in self._names():
                project = self._project(name)
                states = project.files if project.writer is not None else None
                for path, state in (states or project.committed_files()).items():
                    found[path] = state
                    self._where[path] = name
                    self._ids[state.file_id] = (name, path)
            return found

    def reset_file(self, path_key: str, project_dir: str, session_id: str, identity: str) -> int:
        with self._lock:
            name = project_name(project_dir)
            elsewhere = self._where.get(path_key)
            if elsewhere is not None and elsewhere != name:
                self.drop_file(path_key)
            project = self._writable(name)
            assert project.writer is not None
            held = project.files.get(path_key)
            if held is not None and (held.project_dir, held.session_id, held.identity) == (
                project_dir,
                session_id,
                identity,
            ):
                # Another indexer reset this version since the caller listed the files: its
                # progress stands, and the caller's rows from 0 are refused by add_entries.
                self._where[path_key] = name
                self._ids[held.file_id] = (name, path_key)
                return held.file_id
            project.writer.delete_documents_by_term("path", path_key)
            state = FileState(file_id_of(path_key), path_key, project_dir, session_id, identity, 0)
            project.writer.add_document(_state_doc(state))
            project.files[path_key] = state
            self._where[path_key] = name
            self._ids[state.file_id] = (name, path_key)
            self._written(project, 0)
            return state.file_id

    def add_entries(
        self, file_id: int, rows: Sequence[EntryRow], start: int, indexed_to: int
    ) -> bool:
        with self._lock:
            name, path_key = self._ids.get(file_id, ("", ""))
            if not name:
                raise LookupError("file is not indexed")
            project = self._writable(name)
            state = project.files.get(path_key)
            if state is None or state.file_id != file_id:
                raise LookupError("file is not indexed")
            if state.indexed_to != start:
                return False
            writer = project.writer
            assert writer is not None
            seq = time.time_ns() // 1000
            size = 0
            for row in rows:
                key = entry_key(path_key, row.offset, row.ts_ms)
                while key in project.keys:
                    key += 1  # two entries hashed to one key: take the next
                project.keys.add(key)
                writer.add_document(_entry_doc(state, row, key, seq))
                size += len(row.text)
            # The file's state goes with its entries: replaced in the same commit.
            writer.delete_documents_by_query(
                tantivy.Query.boolean_query(
                    [(tantivy.Occur.Must, _term("path", path_key)), _filter(_term("kind", _FILE))]
                )
            )
            state = replace(state, indexed_to=indexed_to)
            writer.add_document(_state_doc(state))
            project.files[path_key] = state
            self._written(project, size)
            return True

    @staticmethod
    def _written(project: _Project, size: int) -> None:
        now = time.monotonic()
        if project.first_pending is None:
            project.first_pending = now
        project.pending_bytes += size
        if project.pending_bytes >= COMMIT_BYTES or now - project.first_pending >= COMMIT_SECONDS:
            project.commit()

    def drop_file(self, path_key: str) -> None:
        with self._lock:
            name = self._where.pop(path_key, None)
            if name is None:
                return
            try:
                project = self._writable(name)
            except LookupError:
                return  # the process that holds the project drops it
            assert project.writer is not None
            project.writer.delete_documents_by_term("path", path_key)
            project.files.pop(path_key, None)
            self._ids.pop(file_id_of(path_key), None)
            self._written(project, 0)

    def flush(self) -> None:
        with self._lock:
            for project in self._projects.values():
                project.commit()

    def search(
        self,
        query: Query,
        filters: Filters,
        projects: frozenset[str] | None,
        page: Page,
        limit: int,
    ) -> list[IndexHit]:
        scope = project_scope(filters, projects)
        if scope is None:
            names = self._names()
        else:
            present = set(self._names())
            names = sorted(n for n in map(project_name, scope) if n in present)
        if not names or limit <= 0:
            return []
        wanted = tantivy_query(query, filters, page)
        found = list(self._candidates(names, wanted, page, limit))
        if page.order == Order.NEWEST:
            found.sort(key=lambda c: -c[1])
            chosen = found[:limit]
        else:
            found.sort(key=lambda c: (-c[0], -c[1]))
            chosen = found[page.offset : page.offset + limit]
        return [_hit(searcher.doc(address)) for _, _, searcher, address in chosen]

    def _candidates(
        self, names: list[str], wanted: tantivy.Query, page: Page, limit: int
    ) -> Iterator[tuple[float, int, tantivy.Searcher, tantivy.DocAddress]]:
        """(score, key, searcher, address) of each project's best hits for the page."""
        for name in names:
            searcher = self._project(name).searcher()
            if page.order == Order.NEWEST:
                result = searcher.search(
                    wanted, limit, count=False, order_by_field="key", order=tantivy.Order.Desc
                )
                for key, address in result.hits:
                    yield 0.0, int(key), searcher, address
                continue
            # Tantivy's top hits cut a run of equal scores anywhere: asking for more keeps
            # the run whole, so it goes in key order on every page alike.
            hits = searcher.search(wanted, page.offset + limit + TIE_SLACK, count=False).hits
            keys = searcher.fast_field_values("key", [address for _, address in hits])
            for (score, address), key in zip(hits, keys, strict=True):
                yield float(score), int(key or 0), searcher, address

    def stored_entries(self) -> Iterator[dict[str, object]]:
        """Every committed entry's stored fields, project by project (for checks)."""
        for name in self._names():
            searcher = self._project(name).searcher()
            limit = max(1, searcher.num_docs)
            for _, address in searcher.search(_term("kind", _ENTRY), limit, count=False).hits:
                yield stored(searcher.doc(address))

    def complete(self) -> bool:
        return (self._root / "built").exists()

    def mark_complete(self) -> None:
        if not self.complete():
            (self._root / "built").write_text(FORMAT)

    def close(self) -> None:
        with self._lock:
            for project in self._projects.values():
                project.release()
            self._projects.clear()


def _migrate(state_dir: Path, root: Path) -> None:
    """Delete the FTS5 file of earlier versions and an index of another format (once, under
    a lock: the workers of one service open it together)."""
    with open(state_dir / "search.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                (state_dir / (OLD_FILE_NAME + suffix)).unlink()
        marker = root / "format"
        try:
            current = marker.read_text()
        except FileNotFoundError:
            current = ""
        if current != FORMAT:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            marker.write_text(FORMAT)
