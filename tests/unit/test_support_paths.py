"""The test helpers' own paths: screenshots land in the repository's gitignored
test-artifacts/ (never beside the checkout), unless SCROLLBACK_TEST_ARTIFACTS says otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import gateway

REPO = Path(__file__).resolve().parents[2]


def test_artifacts_go_to_the_repositorys_test_artifacts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCROLLBACK_TEST_ARTIFACTS", raising=False)
    assert (REPO / "pyproject.toml").is_file()
    assert gateway.artifacts_dir() == REPO / "test-artifacts"


def test_artifacts_directory_can_be_moved(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SCROLLBACK_TEST_ARTIFACTS", str(tmp_path / "shots"))
    assert gateway.artifacts_dir() == tmp_path / "shots"
