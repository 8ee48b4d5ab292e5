"""Fixtures of the gateway tests: `stack`, real services and a real gateway on 127.0.0.1:0, and
`browser`, Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import GatewayStack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[GatewayStack]:
    """History and media servers (no gateway yet: tests start it with or without auth)."""
    running = GatewayStack(tmp_path)
    try:
        yield running
    finally:
        running.close()


CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium from the Debian package."""
    reason = ""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "playwright is not installed"
    if not reason and not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        reason = "Debian's chromium is not installed (scripts/test installs it)"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            launched.close()
