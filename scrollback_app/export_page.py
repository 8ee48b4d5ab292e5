"""The page of `scrollback export --html`: the viewer's own rendering, as static files.

The export directory holds `index.html`, `session.js` (the session and its entries in the
proto's canonical JSON mapping, each media ref's `url` the exported file), `media/` and
`viewer/`: a copy of the viewer's renderer (`render.js`), its style and vendored libraries,
and `export.js`, which draws the entries as the gateway's viewer does. The plain HTML of each
entry stays in a `<noscript>` block for a browser without scripts. The page's CSP allows its
own files only, as the gateway's does.
"""

from __future__ import annotations

import html
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

# The viewer files an export needs (relative to gateway/static).
ASSETS = (
    "render.js",
    "export.js",
    "viewer.css",
    "vendor/marked.min.js",
    "vendor/marked.LICENSE.md",
    "vendor/purify.min.js",
    "vendor/purify.LICENSE",
    "vendor/purify.LICENSE-MPL",
    "vendor/highlight.min.js",
    "vendor/highlight.css",
    "vendor/highlight.LICENSE",
    "vendor/README.md",
)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'"
)

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{title}</title>
<link rel="stylesheet" href="viewer/vendor/highlight.css">
<link rel="stylesheet" href="viewer/viewer.css">
<script src="viewer/vendor/marked.min.js" defer></script>
<script src="viewer/vendor/purify.min.js" defer></script>
<script src="viewer/vendor/highlight.min.js" defer></script>
<script src="viewer/render.js" defer></script>
<script src="session.js" defer></script>
<script src="viewer/export.js" defer></script>
</head>
<body class="export">
<header id="bar">
<div class="bar-top"><span class="home">Scrollback</span> <span id="title">{title}</span></div>
<div id="where" class="where"></div>
<div id="insight" class="insight" hidden></div></header>
<main id="main">
<noscript>
{fallback}
</noscript>
</main>
</body>
</html>
"""


def write_assets(directory: Path) -> None:
    """Copy the viewer's renderer, style and vendored libraries into `directory`/viewer."""
    static = resources.files("gateway") / "static"
    for name in ASSETS:
        target = directory / "viewer" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with resources.as_file(static / name) as source:
            shutil.copyfile(source, target)


def write_page(
    directory: Path,
    title: str,
    session: dict[str, Any],
    entries: list[dict[str, Any]],
    fallback: str,
) -> Path:
    """Write index.html and session.js; the path of index.html."""
    data = json.dumps({"session": session, "entries": entries}, ensure_ascii=True)
    # A script file, not inline: the CSP (script-src 'self') refuses inline scripts. ASCII
    # (ensure_ascii), so it reads the same whatever encoding the browser guesses for it.
    (directory / "session.js").write_text(
        f'"use strict";\nconst SCROLLBACK_EXPORT = {data};\n', encoding="utf-8"
    )
    index = directory / "index.html"
    index.write_text(
        PAGE.format(csp=CSP, title=html.escape(title), fallback=fallback), encoding="utf-8"
    )
    return index
