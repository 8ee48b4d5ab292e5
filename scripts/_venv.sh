# Sourced by scripts/up and scripts/test: make .venv with the project installed.
# Usage: ensure_venv EXTRAS   (EXTRAS is "" or "[dev]")
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SCROLLBACK_VENV:-$REPO/.venv}"

find_python() {
  for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  echo "scrollback: Python 3.11 or newer is required" >&2
  return 1
}

ensure_venv() {
  local extras="$1"
  local python
  python="$(find_python)"
  if [ ! -x "$VENV/bin/python" ]; then
    "$python" -m venv "$VENV"
  fi
  # Reinstall only when pyproject.toml or the extras changed.
  local stamp="$VENV/.scrollback-installed"
  local want
  want="$(cat "$REPO/pyproject.toml" | sha256sum | cut -c1-16)-$extras"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$REPO$extras"
    echo "$want" >"$stamp"
  fi
}
