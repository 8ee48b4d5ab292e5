"""The viewer's browser tests' own tools: a page opened in Chromium and axe-core run in it, in
light and dark at a desktop's 1280 px and a phone's 390 px."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support.gateway import REPO

AXE = REPO / ".tools" / "node_modules" / "axe-core" / "axe.min.js"

# (width, height, colour scheme): a laptop and a phone, each light and dark.
SCREENS = (
    (1280, 800, "light"),
    (1280, 800, "dark"),
    (390, 844, "light"),
    (390, 844, "dark"),
)


def open_page(browser: Any, url: str, *, ready: str = "", **context: Any) -> Any:
    """A new page at `url`, once the viewer says it is ready (and `ready` is there); the
    page's script errors collect in `page.errors`."""
    page = browser.new_context(
        viewport=context.pop("viewport", {"width": 1280, "height": 800}), **context
    ).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    if ready:
        page.wait_for_selector(ready)
    page.errors = errors
    return page


def axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands."""
    if not AXE.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("axe-core is not installed (scripts/test installs it into .tools)")
        pytest.skip("axe-core is not installed (scripts/test installs it into .tools)")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        "async () => (await axe.run(document, { resultTypes: ['violations'] })).violations"
        ".map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 5)"
        ".map((n) => n.target.join(' ') + ': ' + n.failureSummary) }))"
    )
    return [v for v in result if v["impact"] in ("serious", "critical")]


def axe_everywhere(browser: Any, url: str, *, ready: str = "", then: str = "") -> dict[str, Any]:
    """axe-core's serious and critical violations at each of SCREENS (empty when clean).
    `then`: a script run before the check (to open a panel, say)."""
    found: dict[str, Any] = {}
    for width, height, scheme in SCREENS:
        # bypass_csp only so that axe-core's script can be added; the page's CSP is checked
        # by test_gateway_http.
        page = open_page(
            browser,
            url,
            ready=ready,
            viewport={"width": width, "height": height},
            color_scheme=scheme,
            bypass_csp=True,
        )
        if then:
            page.evaluate(then)
            page.wait_for_timeout(200)
        violations = axe(page)
        if violations:
            found[f"{width}px {scheme}"] = violations
        page.context.close()
    return found
