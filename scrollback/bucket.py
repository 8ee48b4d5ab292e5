"""The transcripts root in a bucket: the layout of scrollback.transcripts over object keys.

`BucketRoot` is a `TranscriptSource` (scrollback.transcripts) whose index
comes from listing a key prefix instead of walking a directory, by the layouts
of scrollback.layouts: `<prefix>/<project>/<sessionId>.jsonl`,
sub-agents at `<prefix>/<project>/<sessionId>/subagents/agent-<id>.jsonl` or
`<prefix>/<project>/agent-<id>.jsonl`, the same file-name rules (names that
are not ids are skipped and reported), the same visibility per Principal,
the same snapshot read without a lock. A bucket has no links and no
directories, so every listed key is inside its project.

With a Codex sessions prefix (`s3://bucket/.../sessions`) its rollouts are
listed too, from `<sessions>/YYYY/MM/DD/` and the sibling
`archived_sessions/`; a rollout's project is the `cwd` of its first line,
read with ranged GETs once per object version (key, ETag, size, Last-Modified
as listed), "no project" remembered too, so a listing of unchanged rollouts
reads none of them.

A listing lists the whole prefix (pages of 1000 keys). It runs when the
index is older than the rescan interval, or at once on a miss, but never
more often than `MIN_LIST_SECONDS` whoever asks: a crowd of misses, or a
caller looking up ids that do not exist, costs at most one listing per
that interval. A transcript is opened by a HEAD (its size and ETag now)
and read by ranged GETs (scrollback.objects); its size and times in a
listing come from the listing, and what a listing shows (titles, insight)
is read from the version listed, with no HEAD (`open_listed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from scrollback.directory import DirectoryRoot
from scrollback.layouts import (
    CODEX,
    CODEX_ARCHIVE_DIR,
    claude_code_names,
    is_subagent_id,
    read_session_meta,
    rollout_session_id,
)
from scrollback.linefile import ByteSource, FileVersion, SourceStat
from scrollback.objects import Bucket, BucketLocation, ObjectChangedError, ObjectInfo, ObjectSource
from scrollback.principals import Principal
from scrollback.transcripts import (
    EMPTY_ROOT,
    Catalog,
    RootSnapshot,
    SessionNotFoundError,
    TranscriptFile,
    TranscriptSource,
    log_skipped,
    read_closed,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# The shortest time between two listings of the bucket, whoever asks.
MIN_LIST_SECONDS = 1.0
# How deep the dated tree of Codex's sessions prefix is (YYYY/MM/DD/file).
_CODEX_PARTS = 4
# An object version as a listing names it: key, ETag, size and Last-Modified.
_Version = tuple[str, str, int, int]


def claude_code_object(relative: str, key: str, skipped: list[str]) -> TranscriptFile | None:
    """The transcript a key under the prefix is, by the Claude Code layout, or None."""
    names = claude_code_names(relative.split("/"))
    if isinstance(names, str):
        skipped.append(names)
        return None
    if names is None:
        return None
    project, session_id, parent = names
    return TranscriptFile(
        session_id=session_id,
        project_dir=project,
        location=key,
        is_subagent=is_subagent_id(session_id, parent),
        parent_session_id=parent,
    )


class BucketRoot:
    """The transcripts under a bucket prefix (and Codex's rollouts under another), jailed by key.

    `refreshes` counts the listings, `dir_scans` the keys they listed.
    """

    def __init__(
        self,
        bucket: Bucket,
        *,
        rescan_interval: float = 2.0,
        report_skipped: bool = False,
        codex: Bucket | None = None,
    ) -> None:
        self.bucket = bucket
        self.codex_bucket = codex
        self._report_skipped = report_skipped
        self.skipped: tuple[str, ...] = ()
        self.refreshes = 0
        self.dir_scans = 0
        self._objects: dict[str, ObjectInfo] = {}
        # A listed rollout's version -> its cwd, read once per object version.
        self._codex_projects: dict[_Version, str] = {}
        self._listed_at = float("-inf")
        self._catalog = Catalog(
            self._rebuild,
            rescan_interval=rescan_interval,
            exists=self.exists,
            jailed=self.is_jailed,
        )

    @property
    def location(self) -> str:
        """The bucket's URL (no secret in it)."""
        return self.bucket.location.url

    # -- the index ----------------------------------------------------------

    def _rebuild(self) -> RootSnapshot | None:
        """List the prefix again (at most once per MIN_LIST_SECONDS): the new snapshot."""
        now = self._catalog.refreshed_at
        if now - self._listed_at < MIN_LIST_SECONDS and self._catalog.snapshot is not EMPTY_ROOT:
            return None
        self.refreshes += 1
        self._listed_at = now
        objects: dict[str, ObjectInfo] = {}
        files: list[TranscriptFile] = []
        skipped: list[str] = []
        base = self.bucket.location.key("")
        for info in self.bucket.list(base):
            self.dir_scans += 1
            transcript = claude_code_object(info.key[len(base) :], info.key, skipped)
            if transcript is not None:
                objects[info.key] = info
                files.append(transcript)
        if self.codex_bucket is not None:
            files += self._codex_files(self.codex_bucket, objects)
        self._objects = objects
        found = tuple(sorted(skipped))
        if self._report_skipped and found != self.skipped:
            log_skipped(found)
        self.skipped = found
        return RootSnapshot.of(files)

    def _codex_files(self, codex: Bucket, objects: dict[str, ObjectInfo]) -> list[TranscriptFile]:
        """The rollouts under Codex's sessions prefix and its sibling archive."""
        sessions = codex.location.key("")
        parent = sessions.rstrip("/").rpartition("/")[0]
        archive = (f"{parent}/" if parent else "") + CODEX_ARCHIVE_DIR + "/"
        files: list[TranscriptFile] = []
        listed: set[_Version] = set()
        for base, depth in ((sessions, _CODEX_PARTS), (archive, 1)):
            for info in codex.list(base):
                parts = info.key[len(base) :].split("/")
                session_id = rollout_session_id(parts[-1])
                if len(parts) != depth or session_id is None:
                    continue
                objects[info.key] = info
                files.append(
                    TranscriptFile(
                        session_id=session_id,
                        project_dir=self._codex_project(codex, info, listed),
                        location=info.key,
                        is_subagent=False,
                        parent_session_id="",
                        source=CODEX,
                    )
                )
        # Only the versions listed now are kept: a rollout re-uploaded as it grows leaves none.
        self._codex_projects = {v: c for v, c in self._codex_projects.items() if v in listed}
        return files

    def _codex_project(self, codex: Bucket, info: ObjectInfo, listed: set[_Version]) -> str:
        """A rollout's cwd ("" for none) from its first line, read once per object version.

        Read by ranged GETs pinned to the version the listing found (no HEAD); an
        object version never changes, so "no project" is an answer kept like any other.
        """
        version = (info.key, info.etag, info.size, info.modified_ns)
        listed.add(version)
        cwd = self._codex_projects.get(version)
        if cwd is None:
            try:
                with ObjectSource(codex, info) as source:
                    cwd, _ = read_session_meta(source)
            except (OSError, ObjectChangedError):
                return ""  # gone or replaced since the listing: the next listing has its version
        self._codex_projects[version] = cwd
        return cwd

    # -- the API ------------------------------------------------------------

    def _bucket_of(self, transcript: TranscriptFile) -> Bucket:
        if transcript.source == CODEX and self.codex_bucket is not None:
            return self.codex_bucket
        return self.bucket

    def list(self, principal: Principal | None) -> list[TranscriptFile]:
        """The transcripts the principal may see (scrollback.transcripts.Catalog.list)."""
        return self._catalog.list(principal)

    def resolve(self, session_id: str, principal: Principal | None) -> TranscriptFile:
        """The transcript of a session id (scrollback.transcripts.Catalog.resolve)."""
        return self._catalog.resolve(session_id, principal)

    def name_of(self, transcript: TranscriptFile, principal: Principal | None) -> str:
        """The id a principal names a listed transcript by (Catalog.name_of)."""
        return self._catalog.name_of(transcript, principal)

    def exists(self, transcript: TranscriptFile) -> bool:
        """True if the last listing had the object (a HEAD at open tells if it still does)."""
        return transcript.location in self._objects

    def stat(self, transcript: TranscriptFile) -> SourceStat:
        """The object's size and times in the last listing; FileNotFoundError if it had none."""
        info = self._objects.get(transcript.location)
        if info is None:
            raise FileNotFoundError("no such transcript")
        return info.stat()

    def key_of(self, transcript: TranscriptFile) -> str:
        """As DirectoryRoot.key_of: the key under the prefix; a rollout's after `//codex/`."""
        key = transcript.location
        if transcript.source == CODEX and self.codex_bucket is not None:
            sessions = self.codex_bucket.location.key("").rstrip("/")
            home = sessions.rpartition("/")[0]
            return "//codex/" + (key[len(home) + 1 :] if home else key)
        return key[len(self.bucket.location.key("")) :]

    def is_jailed(self, transcript: TranscriptFile) -> bool:
        """Keys have no links: a listed transcript is always inside its project."""
        return True

    def open(self, transcript: TranscriptFile) -> ByteSource:
        """The object as it is now (a HEAD), read by ranged GETs; SessionNotFoundError if gone."""
        try:
            return self._bucket_of(transcript).open(transcript.location)
        except FileNotFoundError:
            raise SessionNotFoundError() from None

    def open_listed(self, transcript: TranscriptFile) -> ByteSource:
        """The object's version the last listing saw (its size and ETag), with no HEAD; a
        read fails with ObjectChangedError once it was replaced."""
        info = self._objects.get(transcript.location)
        if info is None:
            return self.open(transcript)
        return ObjectSource(self._bucket_of(transcript), info)

    def read_listed(self, transcript: TranscriptFile, work: Callable[[ByteSource], T]) -> T:
        """`work` on the version listed, or once more on the version there now (a HEAD) if
        that one was replaced meanwhile."""
        try:
            with self.open_listed(transcript) as source:
                return work(source)
        except ObjectChangedError:
            pass
        return read_closed(self.open(transcript), work)

    def version(self, opened: ByteSource, stat: SourceStat | None = None) -> FileVersion:
        """An open object's version: its key's hash as inode, and its head (FileVersion.of)."""
        return FileVersion.of(opened, stat)


def transcript_source(
    transcripts: Path | BucketLocation,
    *,
    buckets: Callable[[BucketLocation], Bucket],
    rescan_interval: float = 2.0,
    report_skipped: bool = False,
    codex: Path | BucketLocation | None = None,
    gemini: Path | None = None,
) -> TranscriptSource:
    """The source a parsed transcripts location names: a directory, or a bucket.

    `buckets` gives the client of a bucket location (the caller keeps one per
    location, so every root of a process shares its block cache). A Codex
    sessions location of the other kind is not read.
    """
    if isinstance(transcripts, Path):
        return DirectoryRoot(
            transcripts,
            rescan_interval=rescan_interval,
            report_skipped=report_skipped,
            codex=codex if isinstance(codex, Path) else None,
            gemini=gemini,
        )
    return BucketRoot(
        buckets(transcripts),
        rescan_interval=rescan_interval,
        report_skipped=report_skipped,
        codex=buckets(codex) if isinstance(codex, BucketLocation) else None,
    )
