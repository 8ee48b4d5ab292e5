"""Every TranscriptSource implementation behind one harness, so one suite tests them all.

A harness keeps transcripts by names relative to a home, in the same layout
for every source: `projects/<project>/<sessionId>.jsonl` (Claude Code) and
`codex/sessions/YYYY/MM/DD/rollout-...jsonl` or `codex/archived_sessions/...`
(Codex); a directory's home also holds Gemini CLI's home, `gemini/tmp/<project>/
chats/...` (Gemini's home is a local directory, never a bucket). `write` puts bytes there (a whole new version), `remove` deletes
them, `source` makes the source over that home. `DirectoryHarness` keeps them
as files, `BucketHarness` as objects of a real SeaweedFS (tests/support/seaweed.py),
`OpencodeHarness` as files beside an opencode database (`opencode`, written
with opencode's schema by tests/support/opencode.py), its source the
combined one `up` serves.
A source of another kind joins the suite (tests/integration/objectstore/
test_source_contract.py) with a harness of its own.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Protocol

import obstore

from scrollback.bucket import BucketRoot
from scrollback.contract.refs import CLAUDE_CODE, CODEX, OPENCODE
from scrollback.directory import DirectoryRoot
from scrollback.objects import Bucket, BucketLocation
from scrollback.opencode.combined import CombinedSource
from scrollback.opencode.source import OpencodeSource
from scrollback.transcripts import TranscriptSource
from tests.support.opencode import OpencodeDb
from tests.support.seaweed import BUCKET, SeaweedServer


class SourceHarness(Protocol):
    """Transcripts written by relative name, and a source over them."""

    name: str

    def write(self, relative: str, data: bytes) -> None: ...
    def grow(self, relative: str, data: bytes, more: bytes) -> None: ...
    def remove(self, relative: str) -> None: ...
    def source(self, *, rescan_interval: float = 0.0) -> TranscriptSource: ...


class DirectoryHarness:
    """Files under a temporary home: DirectoryRoot over `projects`, Codex's `codex/sessions`,
    Gemini's home `gemini`."""

    name = "directory"

    def __init__(self, home: Path) -> None:
        self.home = home
        (home / "projects").mkdir(parents=True, exist_ok=True)
        (home / "codex" / "sessions").mkdir(parents=True, exist_ok=True)
        (home / "gemini" / "tmp").mkdir(parents=True, exist_ok=True)

    def write(self, relative: str, data: bytes) -> None:
        """A new file (written aside and renamed over, as a whole new version)."""
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)

    def grow(self, relative: str, data: bytes, more: bytes) -> None:
        """`more` appended to the file that holds `data` (a writer appending)."""
        with (self.home / relative).open("ab") as handle:
            handle.write(more)

    def remove(self, relative: str) -> None:
        """Delete the file."""
        (self.home / relative).unlink()

    def source(self, *, rescan_interval: float = 0.0) -> TranscriptSource:
        """DirectoryRoot over the home's projects, with its Codex sessions dir and Gemini home."""
        return DirectoryRoot(
            self.home / "projects",
            rescan_interval=rescan_interval,
            report_skipped=True,
            codex=self.home / "codex" / "sessions",
            gemini=self.home / "gemini",
        )


class BucketHarness:
    """Objects under a fresh prefix of the SeaweedFS bucket: BucketRoot over `<prefix>/projects`."""

    name = "bucket"

    def __init__(self, seaweed: SeaweedServer) -> None:
        self.prefix = f"contract-{uuid.uuid4().hex[:10]}"
        self._store = seaweed.store()

    def write(self, relative: str, data: bytes) -> None:
        """A new object version (an upload replaces the object whole)."""
        obstore.put(self._store, f"{self.prefix}/{relative}", data)

    def grow(self, relative: str, data: bytes, more: bytes) -> None:
        """`data + more` uploaded over the object (a bucket grows by a new upload)."""
        self.write(relative, data + more)

    def remove(self, relative: str) -> None:
        """Delete the object."""
        obstore.delete(self._store, f"{self.prefix}/{relative}")

    def source(self, *, rescan_interval: float = 0.0) -> TranscriptSource:
        """BucketRoot over `<prefix>/projects`, Codex's rollouts under `<prefix>/codex/sessions`
        (credentials from this process's AWS variables)."""
        return BucketRoot(
            Bucket(BucketLocation(BUCKET, f"{self.prefix}/projects"), cache_bytes=0),
            rescan_interval=rescan_interval,
            report_skipped=True,
            codex=Bucket(BucketLocation(BUCKET, f"{self.prefix}/codex/sessions"), cache_bytes=0),
        )


class OpencodeHarness(DirectoryHarness):
    """Files as DirectoryHarness keeps them, and an opencode database beside them: the
    combined source of both (Claude Code and Codex files first, then opencode)."""

    name = "opencode"

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.opencode = OpencodeDb(home / "opencode.db")

    def source(self, *, rescan_interval: float = 0.0) -> TranscriptSource:
        """The directory root and the database's sessions as one source."""
        files = super().source(rescan_interval=rescan_interval)
        database = OpencodeSource(self.opencode.path, rescan_interval=rescan_interval)
        return CombinedSource(
            [(frozenset({CLAUDE_CODE, CODEX}), files), (frozenset({OPENCODE}), database)]
        )
