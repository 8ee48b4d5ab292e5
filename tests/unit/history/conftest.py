"""Unit tests of the history service's pure code: make the package importable from a fresh clone."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if (
    importlib.util.find_spec("history_service") is None
):  # an editable install made before it existed
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
