# Shared by scripts/demo, scripts/test and scripts/export_round: install what is missing.
# Sourced, not run. Everything lands under the repository (git-ignored) so a second run reuses it.

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APP_VENV="$REPO_ROOT/.venv"
LABEL_STUDIO_VERSION="1.23.2"
LABEL_STUDIO_HOME="$REPO_ROOT/.cache/label-studio"
PYTHON="${PYTHON:-python3}"

log() { printf '[dynaval] %s\n' "$*" >&2; }

# pip, minus the noise of index locations that do not exist on this machine.
_pip() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

_hash_of() { sha256sum "$@" | sha256sum | cut -c1-16; }

# The app's virtual environment at .venv, reinstalled only when pyproject.toml changes.
# torch is pinned in the same pip call as transformers so that the local CPU wheel is used.
ensure_app_venv() {
  local stamp="$APP_VENV/.dynaval-installed" want
  want="$(_hash_of "$REPO_ROOT/pyproject.toml")"
  if [ -x "$APP_VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  log "installing the app into $APP_VENV (first run: a few minutes)"
  [ -x "$APP_VENV/bin/python" ] || "$PYTHON" -m venv "$APP_VENV"
  _pip "$APP_VENV/bin/python" -m pip install --quiet --upgrade pip
  _pip "$APP_VENV/bin/python" -m pip install --quiet "torch==2.13.0" -e "$REPO_ROOT[dev]"
  echo "$want" > "$stamp"
}

# Label Studio in its own cached environment (it pins Django, pytz and friends that would
# fight the app's own dependencies).
label_studio_venv() { echo "$LABEL_STUDIO_HOME/venv-$LABEL_STUDIO_VERSION"; }

ensure_label_studio_venv() {
  local venv
  venv="$(label_studio_venv)"
  if [ -x "$venv/bin/label-studio" ] && [ -f "$venv/.dynaval-installed" ]; then
    return 0
  fi
  log "installing Label Studio $LABEL_STUDIO_VERSION into $venv (first run: 2 to 4 minutes)"
  rm -rf "$venv"
  mkdir -p "$LABEL_STUDIO_HOME"
  "$PYTHON" -m venv "$venv"
  _pip "$venv/bin/python" -m pip install --quiet --upgrade pip
  _pip "$venv/bin/python" -m pip install --quiet "label-studio==$LABEL_STUDIO_VERSION"
  touch "$venv/.dynaval-installed"
}

# The machine's PostgreSQL on 127.0.0.1:5432 (trust auth); started if it does not answer.
ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    return 0
  fi
  log "starting PostgreSQL on 127.0.0.1:5432"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 1
  done
  log "PostgreSQL did not start on 127.0.0.1:5432"
  return 1
}

# The machine's Redis on 127.0.0.1:6379 (the rate limiter's shared storage in tests/e2e/test_limits.py);
# started, keeping nothing on disk, if it does not answer.
ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    return 0
  fi
  log "starting Redis on 127.0.0.1:6379"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && return 0
    sleep 1
  done
  log "Redis did not start on 127.0.0.1:6379"
  return 1
}

# Debian's Chromium at /usr/bin/chromium, which Playwright drives in the browser tests (Playwright
# downloads no browser of its own here: `playwright install` is never run). Installed with apt when
# missing; the test machines run as root, elsewhere sudo is used.
CHROMIUM="/usr/bin/chromium"

ensure_browser() {
  if [ -x "$CHROMIUM" ]; then
    return 0
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing Debian's chromium for the browser tests (apt-get: a minute or two)"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  if [ ! -x "$CHROMIUM" ]; then
    log "chromium did not install at $CHROMIUM"
    return 1
  fi
}
