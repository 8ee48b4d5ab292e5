"""A fresh machine (no ~/.claude/projects): `scrollback up` serves the bundled samples.

Runs the real `scrollback up` with HOME pointed at an empty directory and no
SCROLLBACK_* variables, then reads a window and a photo from it with the
client library: the photo must equal, byte for byte, the base64 payload of
the bundled transcript. Also: the state dir does not depend on the working
directory, and `scrollback gc` finds the state `up` used.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from client import Client
from scrollback.samples import PHOTO_SESSION, SAMPLES_ROOT
from tests.support.cli import fresh_env

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

SCROLLBACK = str(Path(sys.executable).with_name("scrollback"))


def _photo_bytes() -> bytes:
    path = next(SAMPLES_ROOT.glob(f"*/{PHOTO_SESSION}.jsonl"))
    entry = json.loads(path.read_text().splitlines()[0])
    block = next(b for b in entry["message"]["content"] if b.get("type") == "image")
    return base64.b64decode(block["source"]["data"])


def test_up_on_a_fresh_machine_serves_the_bundled_samples(
    fresh_up: tuple[str, str, Path, list[str]],
) -> None:
    history, media, home, lines = fresh_up
    output = "".join(lines)
    looked_for = home / ".claude" / "projects"
    notice = next(line for line in lines if "bundled sample sessions" in line)
    assert str(looked_for) in notice and "SCROLLBACK_TRANSCRIPTS" in notice
    state = home / ".local" / "state" / "scrollback"
    assert f"serving transcripts from {SAMPLES_ROOT}" in output
    assert f"state dir {state}" in output
    with Client(history, media, tls=False) as sb:
        sessions = {s.session_id for s in sb.history.iter_sessions()}
        assert PHOTO_SESSION in sessions and len(sessions) >= 3
        window = sb.history.read_window(PHOTO_SESSION)
        refs = [ref for entry in window.entries for ref in entry.media_refs]
        assert refs, "the photo session has a photo"
        photo = sb.media.read_media(refs[0])
    assert photo.data == _photo_bytes()
    assert photo.metadata.content_type == "image/png"
    assert state.is_dir(), "the state dir is under HOME, not the working directory"


def test_gc_uses_the_same_state_dir_from_any_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".local" / "state" / "scrollback").mkdir(parents=True)
    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [SCROLLBACK, "gc", "--json"],
        cwd=elsewhere,
        env=fresh_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not (elsewhere / ".scrollback").exists()
    assert any((home / ".local" / "state" / "scrollback").iterdir()), "gc opened ~/.local/state"
    xdg = tmp_path / "xdg"
    (xdg / "scrollback").mkdir(parents=True)
    result = subprocess.run(
        [SCROLLBACK, "gc", "--json"],
        cwd=elsewhere,
        env=fresh_env(home, XDG_STATE_HOME=str(xdg)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert any((xdg / "scrollback").iterdir()), "gc opened the XDG state dir"


def test_an_installed_package_carries_the_samples_and_their_licenses(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(repo)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    import zipfile

    (wheel,) = tmp_path.glob("scrollback-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = {str(path.relative_to(repo)) for path in SAMPLES_ROOT.rglob("*") if path.is_file()}
    assert bundled and bundled <= names
    for project in SAMPLES_ROOT.iterdir():
        assert f"scrollback/samples/projects/{project.name}/LICENSE" in names
    total = sum(path.stat().st_size for path in SAMPLES_ROOT.rglob("*") if path.is_file())
    assert total < 512 * 1024, "keep the bundled samples small"
