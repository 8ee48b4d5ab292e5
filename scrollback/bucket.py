"""The transcripts root in a bucket: the layout of scrollback.transcripts over object keys.

`BucketRoot` is a `TranscriptRoot` whose index comes from listing a key
prefix instead of walking a directory: `<prefix>/<project>/<sessionId>.jsonl`,
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from scrollback.contract.refs import ID_PATTERN
from scrollback.linefile import ByteSource, SourceStat
from scrollback.objects import Bucket, BucketLocation, ObjectChangedError, ObjectInfo, ObjectSource
from scrollback.transcripts import (
    CODEX,
    CODEX_ARCHIVE_DIR,
    EMPTY_ROOT,
    SUBAGENT_DIR,
    TRANSCRIPT_SUFFIX,
    RootSnapshot,
    SessionNotFoundError,
    TranscriptFile,
    TranscriptRoot,
    log_skipped,
    read_session_meta,
    rollout_session_id,
    session_id_of,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# The shortest time between two listings of the bucket, whoever asks.
MIN_LIST_SECONDS = 1.0
# How deep the dated tree of Codex's sessions prefix is (YYYY/MM/DD/file).
_CODEX_PARTS = 4
# An object version as a listing names it: key, ETag, size and Last-Modified.
_Version = tuple[str, str, int, int]


class BucketRoot(TranscriptRoot):
    """The transcripts under a bucket prefix (and Codex's rollouts under another), jailed by key."""

    def __init__(
        self,
        bucket: Bucket,
        *,
        rescan_interval: float = 2.0,
        report_skipped: bool = False,
        codex: Bucket | None = None,
    ) -> None:
        super().__init__(
            Path(bucket.location.url),
            rescan_interval=rescan_interval,
            report_skipped=report_skipped,
        )
        self.bucket = bucket
        self.codex_bucket = codex
        self._objects: dict[str, ObjectInfo] = {}
        # A listed rollout's version -> its cwd, read once per object version.
        self._codex_projects: dict[_Version, str] = {}
        self._listed_at = float("-inf")

    @property
    def location(self) -> str:
        """The bucket's URL (no secret in it)."""
        return self.bucket.location.url

    # -- the index ----------------------------------------------------------

    def _refresh_locked(self) -> None:
        """List the prefix again (at most once per MIN_LIST_SECONDS) and rebuild the snapshot."""
        now = time.monotonic()
        self._refreshed_at = now
        if now - self._listed_at < MIN_LIST_SECONDS and self._snapshot is not EMPTY_ROOT:
            return
        self.refreshes += 1
        self._listed_at = now
        objects: dict[str, ObjectInfo] = {}
        files: list[TranscriptFile] = []
        skipped: list[str] = []
        location = self.bucket.location
        base = location.key("")
        for info in self.bucket.list(base):
            self.dir_scans += 1
            transcript = self._claude_file(info.key[len(base) :], info.key, skipped)
            if transcript is not None:
                objects[info.key] = info
                files.append(transcript)
        if self.codex_bucket is not None:
            files += self._codex_files(self.codex_bucket, objects)
        by_id: dict[str, list[TranscriptFile]] = {}
        for transcript in files:
            by_id.setdefault(transcript.session_id, []).append(transcript)
        self._objects = objects
        self._snapshot = RootSnapshot({k: tuple(v) for k, v in by_id.items()}, tuple(files))
        found = tuple(sorted(skipped))
        if self._report_skipped and found != self.skipped:
            log_skipped(found)
        self.skipped = found

    @staticmethod
    def _claude_file(relative: str, key: str, skipped: list[str]) -> TranscriptFile | None:
        """The transcript a key under the prefix is, by the Claude Code layout, or None."""
        parts = relative.split("/")
        if not parts[-1].endswith(TRANSCRIPT_SUFFIX) or not parts[0]:
            return None
        if len(parts) == 2:
            session_id = session_id_of(parts[1])
            if session_id is None:
                skipped.append(relative)
                return None
            return TranscriptFile(
                session_id=session_id,
                project_dir=parts[0],
                path=Path(key),
                is_subagent=session_id.startswith("agent-"),
                parent_session_id="",
            )
        if len(parts) == 4 and parts[2] == SUBAGENT_DIR and ID_PATTERN.fullmatch(parts[1]):
            child = session_id_of(parts[3])
            if child is None:
                skipped.append(relative)
                return None
            return TranscriptFile(
                session_id=child,
                project_dir=parts[0],
                path=Path(key),
                is_subagent=True,
                parent_session_id=parts[1],
            )
        return None

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
                        path=Path(info.key),
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

    def exists(self, transcript: TranscriptFile) -> bool:
        """True if the last listing had the object (a HEAD at open tells if it still does)."""
        return str(transcript.path) in self._objects

    def stat(self, transcript: TranscriptFile) -> SourceStat:
        """The object's size and times in the last listing; FileNotFoundError if it had none."""
        info = self._objects.get(str(transcript.path))
        if info is None:
            raise FileNotFoundError("no such transcript")
        return info.stat()

    def key_of(self, transcript: TranscriptFile) -> str:
        """As TranscriptRoot.key_of: the key under the prefix; a rollout's after `//codex/`."""
        key = str(transcript.path)
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
            return self._bucket_of(transcript).open(str(transcript.path))
        except FileNotFoundError:
            raise SessionNotFoundError() from None

    def open_listed(self, transcript: TranscriptFile) -> ByteSource:
        """The object's version the last listing saw (its size and ETag), with no HEAD; a
        read fails with ObjectChangedError once it was replaced."""
        info = self._objects.get(str(transcript.path))
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
        with self.open(transcript) as source:
            return work(source)


def transcript_root(
    transcripts: Path,
    *,
    buckets: Callable[[BucketLocation], Bucket],
    rescan_interval: float = 2.0,
    report_skipped: bool = False,
    codex: Path | None = None,
) -> TranscriptRoot:
    """The root a transcripts location names: a directory, or a bucket (`s3://...`).

    `buckets` gives the client of a bucket location (the caller keeps one per
    location, so every root of a process shares its block cache).
    """
    from scrollback.objects import bucket_location

    location = bucket_location(transcripts)
    codex_location = bucket_location(codex) if codex is not None else None
    if location is None:
        return TranscriptRoot(
            transcripts, rescan_interval=rescan_interval, report_skipped=report_skipped, codex=codex
        )
    return BucketRoot(
        buckets(location),
        rescan_interval=rescan_interval,
        report_skipped=report_skipped,
        codex=buckets(codex_location) if codex_location is not None else None,
    )
