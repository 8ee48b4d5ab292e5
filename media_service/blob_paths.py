"""The ONE module that turns a sha256 into a path under the state dir, jailed.

Layout: `<state>/blobs/ab/cd/<sha256>` for blob bytes, `<state>/blobs/tmp/`
for uploads in progress (same filesystem, so a rename publishes them) and
`<state>/blobs/quarantine/` for corrupt blobs, and
`<state>/blobs/thumbs/ab/cd/<sha256>/<size>.webp` (`<size>.still.webp` for the
still of an animation) for the thumbnails of the original with that sha256. A digest is validated before it
becomes a path, and every path's real location (symlinks resolved) must lie
under the blobs root; otherwise it is refused (as "not found").
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from media_service.errors import MediaNotFoundError
from scrollback.contract.refs import validate_sha256

BLOBS_DIR = "blobs"
TEMP_DIR = "tmp"
QUARANTINE_DIR = "quarantine"
THUMBS_DIR = "thumbs"
THUMB_SUFFIX = ".webp"
STILL_SUFFIX = ".still.webp"
TEMP_SUFFIX = ".part"


class BlobPaths:
    """Builds and jails every blob path of one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / BLOBS_DIR
        self.temp_dir = self.root / TEMP_DIR
        self.quarantine_dir = self.root / QUARANTINE_DIR
        self.thumbs_dir = self.root / THUMBS_DIR

    def ensure_dirs(self) -> None:
        """Create the blobs, temp and quarantine folders."""
        for folder in (self.root, self.temp_dir, self.quarantine_dir, self.thumbs_dir):
            folder.mkdir(parents=True, exist_ok=True)

    def _jailed(self, path: Path) -> Path:
        real_root = os.path.realpath(self.root)
        real = os.path.realpath(path)
        if not real.startswith(real_root + os.sep):
            raise MediaNotFoundError()
        return path

    def blob(self, sha256: str) -> Path:
        """`<state>/blobs/ab/cd/<sha256>` for a valid digest, jailed."""
        validate_sha256(sha256)
        return self._jailed(self.root / sha256[0:2] / sha256[2:4] / sha256)

    def thumbnail_dir(self, sha256: str) -> Path:
        """`<state>/blobs/thumbs/ab/cd/<sha256>`: the thumbnails of one original, jailed."""
        validate_sha256(sha256)
        return self._jailed(self.thumbs_dir / sha256[0:2] / sha256[2:4] / sha256)

    def thumbnail(self, sha256: str, size: int, *, still: bool) -> Path:
        """The thumbnail of an original at one size (`still`: of an animation), jailed."""
        suffix = STILL_SUFFIX if still else THUMB_SUFFIX
        return self._jailed(self.thumbnail_dir(sha256) / f"{int(size)}{suffix}")

    def thumbnails_of(self, sha256: str) -> list[Path]:
        """Every thumbnail file of one original."""
        folder = self.thumbnail_dir(sha256)
        try:
            return [folder / name for name in os.listdir(folder) if name.endswith(THUMB_SUFFIX)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def thumbnail_sets(self) -> Iterator[tuple[str, list[Path]]]:
        """(original sha256, its thumbnail files) for every original that has thumbnails."""
        for first in _names(self.thumbs_dir):
            for second in _names(self.thumbs_dir / first):
                for sha256 in _names(self.thumbs_dir / first / second):
                    try:
                        validate_sha256(sha256)
                    except ValueError:
                        continue
                    if sha256[0:2] == first and sha256[2:4] == second:
                        yield sha256, self.thumbnails_of(sha256)

    def new_temp(self) -> Path:
        """A fresh, unique temp file path for one upload."""
        return self._jailed(self.temp_dir / f"{uuid.uuid4().hex}{TEMP_SUFFIX}")

    def quarantine(self, sha256: str, stamp: float) -> Path:
        """Where a corrupt blob is moved."""
        validate_sha256(sha256)
        return self._jailed(self.quarantine_dir / f"{sha256}.{int(stamp * 1000)}")

    def temp_files(self) -> list[Path]:
        """Every temp file (uploads in progress or left by a crash)."""
        try:
            return [
                self.temp_dir / name
                for name in os.listdir(self.temp_dir)
                if name.endswith(TEMP_SUFFIX)
            ]
        except FileNotFoundError:
            return []


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
