"""The servers pin glibc's mmap threshold so large line buffers go back to the OS."""

from __future__ import annotations

import sys

import pytest

from scrollback.server.memory import pin_mmap_threshold


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_threshold_is_pinned_and_pinning_again_is_harmless() -> None:
    assert pin_mmap_threshold() is True
    assert pin_mmap_threshold() is True
