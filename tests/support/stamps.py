"""Test helpers for file stamps (scrollback.transcripts.stamp_of): a short settling time,
and a count of the calls a stamp should spare."""

from __future__ import annotations

from typing import Any

import pytest

from scrollback import transcripts

# Long enough for a file written by a test to settle, short enough not to slow the tests.
SHORT_SETTLING_SECONDS = 0.3


class CallCount:
    """How many times a patched method was called since `reset`."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self) -> None:
        """Count from zero again."""
        self.calls = 0


def settle_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled SHORT_SETTLING_SECONDS after their last change (not 2 s)."""
    monkeypatch.setattr(transcripts, "SETTLED_SECONDS", SHORT_SETTLING_SECONDS)


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> CallCount:
    """Patch `owner.name` to count its calls; it still does what it did."""
    count = CallCount()
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        count.calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return count
