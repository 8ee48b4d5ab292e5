"""Take the README's screenshots of the viewer: a bundled sample session, light and dark.

`python tools/viewer_screenshots.py` runs both services and the gateway on 127.0.0.1 ports
over a copy of scrollback/samples/projects, opens the session in Debian's Chromium (the one
the browser tests drive) with each colour scheme, and writes docs/viewer-light.png and
docs/viewer-dark.png.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: the tests' stack helper lives in the repository

from tests.support.gateway import GatewayStack  # noqa: E402

SAMPLES = REPO / "scrollback" / "samples" / "projects"
SESSION = "29ccd257-68b1-427f-ae5f-6524b7cb6f20"
CHROMIUM = "/usr/bin/chromium"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="output directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        stack = GatewayStack(Path(scratch))
        try:
            shutil.copytree(SAMPLES, stack.pair.root, dirs_exist_ok=True)
            stack.start_gateway()
            # The header's figures come from the insight index: wait until it has the session.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                insight = httpx.get(f"{stack.url}/api/v1/sessions/{SESSION}").json().get("insight")
                if insight and insight.get("lastTime"):
                    break
                time.sleep(0.2)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
                for scheme in ("light", "dark"):
                    page = browser.new_page(
                        viewport={"width": 1000, "height": 760}, color_scheme=scheme
                    )
                    page.goto(f"{stack.url}/sessions/{SESSION}")
                    page.wait_for_selector("body[data-ready='1']")
                    page.wait_for_selector("#insight .fact")
                    page.wait_for_selector("#rescue .images-toggle")
                    page.evaluate("() => window.scrollTo(0, 0)")
                    page.wait_for_timeout(300)
                    path = args.out / f"viewer-{scheme}.png"
                    page.screenshot(path=str(path))
                    print(path)
                browser.close()
        finally:
            stack.close()


if __name__ == "__main__":
    main()
