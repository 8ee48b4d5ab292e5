# Sourced by scripts/test: install Debian packages the tests need, once.
# Usage: ensure_debs PACKAGE...   (installs only what `dpkg -s` lacks)
# Needs root (or sudo) and Debian's package archive; outside CI a machine
# without either carries on and the tests that need the package skip with
# the reason; under CI=true it is a failure.
set -euo pipefail

ensure_debs() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      echo "scrollback: cannot install ${missing[*]} (not root)" >&2
      [ "${CI:-}" = "true" ] && return 1
      return 0
    fi
  fi
  echo "== installing Debian packages: ${missing[*]}"
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >/dev/null 2>&1; then
    $sudo apt-get update -q >/dev/null
    if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >/dev/null; then
      echo "scrollback: apt-get install ${missing[*]} failed" >&2
      [ "${CI:-}" = "true" ] && return 1
    fi
  fi
  return 0
}
