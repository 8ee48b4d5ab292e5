"""scripts/_venv.sh, the one venv recipe of `./scripts/up` and `./scripts/test`.

The venv's Python is a stand-in that records each pip call and prints what pip prints on
this kind of machine (warning lines), so the test sees which installs the recipe runs and
what reaches the terminal, without a network or a real install.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOISE = "\n".join(f"WARNING: pip warning line {n}" for n in range(9))


def _venv(tmp_path: Path, fails: bool = False) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{venv}/calls"\n'
        f"cat >&2 <<'NOISE'\n{NOISE}\nNOISE\n"
        f"exit {1 if fails else 0}\n"
    )
    python.chmod(0o755)
    return venv


def _ensure(venv: Path, extras: str) -> subprocess.CompletedProcess[str]:
    script = f'source "{ROOT}/scripts/_venv.sh"; ensure_venv "{extras}"'
    return subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin",
                          "SCROLLBACK_VENV": str(venv)}, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def _installs(venv: Path) -> list[str]:
    calls = venv / "calls"
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line for line in lines if "-e " in line]


def test_up_after_test_installs_nothing_and_says_one_line(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    first = _ensure(venv, "[dev]")  # ./scripts/test
    assert first.returncode == 0, first.stderr
    assert len(_installs(venv)) == 1 and _installs(venv)[0].endswith(f"{ROOT}[dev]")
    assert (first.stdout + first.stderr).count("\n") == 1, first.stderr
    assert "pip warning" not in first.stderr
    again = _ensure(venv, "")  # ./scripts/up: the dev extras hold what it needs
    assert again.returncode == 0 and again.stdout == again.stderr == ""
    assert len(_installs(venv)) == 1
    assert _ensure(venv, "[dev]").stderr == "" and len(_installs(venv)) == 1


def test_up_first_then_test_installs_the_extras_once(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    assert _ensure(venv, "").returncode == 0
    assert _ensure(venv, "[dev]").returncode == 0
    assert _ensure(venv, "").returncode == 0
    assert [call.rsplit(" ", 1)[-1] for call in _installs(venv)] == [str(ROOT), f"{ROOT}[dev]"]


def test_a_failed_install_shows_pips_output(tmp_path: Path) -> None:
    failed = _ensure(_venv(tmp_path, fails=True), "")
    assert failed.returncode != 0
    assert "the install failed" in failed.stderr and "pip warning line 8" in failed.stderr
