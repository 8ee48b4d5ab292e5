"""Sample sessions bundled with the package, served by `scrollback up` on a fresh machine.

`SAMPLES_ROOT` is a transcripts root (`<root>/<project>/<session>.jsonl`) of
three real transcripts that other open-source projects committed as test data
(see README.md beside this file; each project folder keeps its LICENSE): one
user message with a pasted screenshot, a short coding session and a small
tool-use session. They ship as package data, so an installed `scrollback`
finds them too.

`CODEX_SAMPLES` is a Codex sessions dir (`<dir>/YYYY/MM/DD/rollout-...jsonl`)
of one generated rollout (written for this project: a pasted screenshot, a
reasoning summary, a shell call and its output), served beside them when no
Codex sessions dir is configured or found either.
"""

from __future__ import annotations

from pathlib import Path

SAMPLES_ROOT = Path(__file__).resolve().parent / "projects"
# The session with the photo, for the quickstart and the tests.
PHOTO_SESSION = "9e953218-585f-4692-89df-9e0747a31c68"
# A Codex CLI sessions dir with one rollout, and that rollout's session id.
CODEX_SAMPLES = Path(__file__).resolve().parent / "codex" / "sessions"
CODEX_SESSION = "0199a7c2-5b1e-7d30-9c4f-3f2a6e8b1d20"
