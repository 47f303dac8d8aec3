#!/usr/bin/env bash
# Run the jupyter-edt Galata (Playwright) UI tests in headless Chromium.
#
#   ui-tests/run.sh [playwright test arguments...]
#
# Idempotent setup first, each step skipped when already done:
#   - Chromium: $CHROMIUM_PATH, else /usr/bin/chromium (or chromium-browser /
#     google-chrome on PATH); as root on Debian/Ubuntu, `apt-get install chromium`
#     when none is found.  Playwright's own browser downloads are never used.
#   - npm packages: `PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci` when node_modules
#     does not match package-lock.json.
#   - free ports for the three test servers (root URL, non-root base URL, JupyterHub):
#     $EDT_UI_PORT / $EDT_UI_BASE_URL_PORT / $EDT_UI_HUB_PORT, else the first free ones
#     from 18888 up.
# Then `npx playwright test "$@"`; the exit status is Playwright's.
#
# Expects the project's virtual environment (../.venv, or $EDT_JUPYTER) with
# jupyter-edt installed (pip install -e . and the lab extension built/linked),
# as `make test` does before calling this script.
#
# Environment: CHROMIUM_PATH, EDT_JUPYTER, EDT_UI_PORT, EDT_UI_BASE_URL_PORT,
# EDT_UI_BASE_URL, EDT_VIRTUAL_GPUS, EDT_UI_SKIP_INSTALL=1 (no apt/npm step); see README.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

log() { printf 'ui-tests: %s\n' "$*" >&2; }

find_chromium() {
  if [[ -n "${CHROMIUM_PATH:-}" ]]; then
    [[ -x "$CHROMIUM_PATH" ]] && { echo "$CHROMIUM_PATH"; return 0; }
    log "CHROMIUM_PATH=$CHROMIUM_PATH is not an executable"
    return 1
  fi
  if [[ -x /usr/bin/chromium ]]; then echo /usr/bin/chromium; return 0; fi
  local name
  for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

# --- Chromium --------------------------------------------------------------
if ! chromium_bin="$(find_chromium)"; then
  if [[ -n "${CHROMIUM_PATH:-}" || "${EDT_UI_SKIP_INSTALL:-0}" == 1 ]]; then
    exit 1
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian's chromium (apt-get install chromium)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
  else
    log "no Chromium found: install it (sudo apt-get install -y chromium) or set CHROMIUM_PATH"
    exit 1
  fi
  chromium_bin="$(find_chromium)" || { log "chromium still not found after apt-get"; exit 1; }
fi
export CHROMIUM_PATH="$chromium_bin"

# --- npm packages (Galata, Playwright) -------------------------------------
stamp="node_modules/.edt-ui-tests-lock.sha256"
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ "${EDT_UI_SKIP_INSTALL:-0}" != 1 ]] \
  && { [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$lock_sum" ]]; }; then
  log "installing the UI test npm packages (npm ci)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_sum" >"$stamp"
fi

# --- Jupyter ---------------------------------------------------------------
if [[ -z "${EDT_JUPYTER:-}" ]]; then
  if [[ -x "$HERE/../.venv/bin/jupyter" ]]; then
    EDT_JUPYTER="$HERE/../.venv/bin/jupyter"
  elif command -v jupyter >/dev/null 2>&1; then
    EDT_JUPYTER="$(command -v jupyter)"
  else
    log "no jupyter found: create the project's .venv first (make test does), or set EDT_JUPYTER"
    exit 1
  fi
fi
export EDT_JUPYTER

# --- Free ports for the test servers ---------------------------------------
free_port() {  # free_port [EXCLUDED...]: the first free TCP port from 18888 up
  local python
  python="$(dirname "$EDT_JUPYTER")/python"
  [[ -x "$python" ]] || python=python3
  "$python" -c '
import socket, sys
excluded = {int(p) for p in sys.argv[1:] if p}
for port in range(18888, 19888):
    if port in excluded:
        continue
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port in 18888-19887")
' "$@"
}
EDT_UI_PORT="${EDT_UI_PORT:-$(free_port "${EDT_UI_BASE_URL_PORT:-}")}"
EDT_UI_BASE_URL_PORT="${EDT_UI_BASE_URL_PORT:-$(free_port "$EDT_UI_PORT")}"
EDT_UI_HUB_PORT="${EDT_UI_HUB_PORT:-$(free_port "$EDT_UI_PORT" "$EDT_UI_BASE_URL_PORT")}"
export EDT_UI_PORT EDT_UI_BASE_URL_PORT EDT_UI_HUB_PORT

log "chromium: $CHROMIUM_PATH ($("$CHROMIUM_PATH" --version 2>/dev/null | head -n1))"
log "jupyter: $EDT_JUPYTER; test servers on 127.0.0.1:$EDT_UI_PORT (/), 127.0.0.1:$EDT_UI_BASE_URL_PORT (${EDT_UI_BASE_URL-/jupyter-edt-ui/}) and a Hub on 127.0.0.1:$EDT_UI_HUB_PORT"

exec npx --no-install playwright test "$@"
