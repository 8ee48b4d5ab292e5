"""Unit tests of the history service's pure code: make the package importable from a fresh clone."""

from __future__ import annotations
