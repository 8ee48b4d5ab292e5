"""Sample sessions bundled with the package, served by `scrollback up` on a fresh machine.

`SAMPLES_ROOT` is a transcripts root (`<root>/<project>/<session>.jsonl`) of
three real transcripts that other open-source projects committed as test data
(see README.md beside this file; each project folder keeps its LICENSE): one
user message with a pasted screenshot, a short coding session and a small
tool-use session. They ship as package data, so an installed `scrollback`
finds them too.
"""

from __future__ import annotations

from pathlib import Path

SAMPLES_ROOT = Path(__file__).resolve().parent / "projects"
# The session with the photo, for the quickstart and the tests.
PHOTO_SESSION = "9e953218-585f-4692-89df-9e0747a31c68"
