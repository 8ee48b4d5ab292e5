"""One bounded cache of what finding a transcript image learned, per image of a file version.

Keyed by (file version, entry uuid, image index, pin), a `Lookup` holds:

- `line`: where the entry's line was (offset, length) when last verified: the
  line is read there again and verified before it is trusted (a stale offset
  costs a search, never a wrong answer);
- `found`: where the image was found and verified, with the file's stamp
  then (scrollback.transcripts.stamp_of) and the line offset hint it was asked
  with: while the file keeps that stamp nothing in it can have changed, so the
  image is found again without reading its line;
- `info`: the decoded bytes' metadata (media_service.payload_facts): the pin
  is a hash of the payload's raw text, so a line whose pin still matches
  decodes to the same bytes.

Least recently used out first past its capacity; thread-safe.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from media_service.blobs import MediaInfo
from media_service.lru import LruCache
from media_service.payload_facts import Found
from scrollback.linefile import FileVersion
from scrollback.transcripts import Stamp

# (file version, entry uuid, image index, pin)
LookupKey = tuple[FileVersion, str, int, str]


@dataclass(frozen=True, slots=True)
class Lookup:
    """What is known of one image of one file version (each part None until learned)."""

    line: tuple[int, int] | None = None
    found: Found | None = None
    stamp: Stamp | None = None
    hint: int | None = None
    info: MediaInfo | None = None


class LookupCache:
    """The lookups of recently asked images, least recently used out first."""

    def __init__(self, capacity: int) -> None:
        self._lookups: LruCache[LookupKey, Lookup] = LruCache(capacity)
        # Read-modify-write of one lookup is one step: two parts learned at once both stay.
        self._update = threading.Lock()

    def __len__(self) -> int:
        return len(self._lookups)

    def get(self, key: LookupKey) -> Lookup:
        """What is known of the image (an empty Lookup when nothing is)."""
        return self._lookups.get(key) or Lookup()

    def _learn(self, key: LookupKey, **parts: object) -> None:
        with self._update:
            known = self._lookups.get(key) or Lookup()
            self._lookups.put(key, dataclasses.replace(known, **parts))  # type: ignore[arg-type]

    def line(self, key: LookupKey) -> tuple[int, int] | None:
        """(offset, length) of the entry's line as last verified, or None."""
        return self.get(key).line

    def remember_line(self, key: LookupKey, offset: int, length: int) -> None:
        """The entry's line was verified at (offset, length)."""
        self._learn(key, line=(offset, length))

    def forget_line(self, key: LookupKey) -> None:
        """The remembered line no longer holds the entry."""
        if self.line(key) is not None:
            self._learn(key, line=None)

    def found(self, key: LookupKey, stamp: Stamp, hint: int | None) -> Found | None:
        """Where the image was found, if under this stamp and asked with this hint."""
        known = self.get(key)
        if known.found is None or known.stamp != stamp or known.hint != hint:
            return None
        return known.found

    def remember_found(self, key: LookupKey, stamp: Stamp, hint: int | None, found: Found) -> None:
        """The image was found and verified at `found` while the file had `stamp`."""
        self._learn(key, found=found, stamp=stamp, hint=hint)

    def info(self, key: LookupKey) -> MediaInfo | None:
        """The decoded bytes' metadata, if known."""
        return self.get(key).info

    def remember_info(self, key: LookupKey, info: MediaInfo) -> None:
        """The decoded bytes' metadata, from a pass over them."""
        self._learn(key, info=info)

    def clear(self) -> None:
        """Forget everything (a fresh server's state, for tests)."""
        self._lookups.clear()

    def lines(self) -> int:
        """How many images' line is remembered (for tests and metrics)."""
        return sum(1 for _, lookup in self._lookups.items() if lookup.line is not None)

    def infos(self) -> int:
        """How many images' metadata is known (for tests and metrics)."""
        return sum(1 for _, lookup in self._lookups.items() if lookup.info is not None)
