# Sourced by scripts/up and scripts/test: make .venv with the project installed.
# Usage: ensure_venv EXTRAS   (EXTRAS is "" or "[dev]")
#
# One recipe for both: the venv records what it holds (a hash of pyproject.toml and the
# extras installed), and the dev extras include everything `up` needs, so `./scripts/up`
# after `./scripts/test` installs nothing. An install runs only when pyproject.toml changed
# or extras are missing; it says so in one line, and pip's own output goes to
# $VENV/install.log, shown only when the install fails.
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
  local stamp="$VENV/.scrollback-installed"
  local hash have=""
  hash="$(sha256sum <"$REPO/pyproject.toml" | cut -c1-16)"
  [ -f "$stamp" ] && have="$(cat "$stamp")"
  if [ "$have" = "$hash-$extras" ] || { [ -z "$extras" ] && [ "$have" = "$hash-[dev]" ]; }; then
    return 0
  fi
  local log="$VENV/install.log"
  echo "scrollback: installing the project${extras:+ with $extras} into $VENV (its log: $log)" >&2
  if ! {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip &&
      "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$REPO$extras"
  } >"$log" 2>&1; then
    echo "scrollback: the install failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
    return 1
  fi
  echo "$hash-$extras" >"$stamp"
}
