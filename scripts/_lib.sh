# Shared by scripts/demo, scripts/test and scripts/export_round: install what is missing.
# Sourced, not run. Everything lands under the repository (git-ignored) so a second run reuses it.

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APP_VENV="$REPO_ROOT/.venv"
LABEL_STUDIO_VERSION="1.23.2"
LABEL_STUDIO_HOME="$REPO_ROOT/.cache/label-studio"
PYTHON="${PYTHON:-python3}"

log() { printf '[dynaval] %s\n' "$*" >&2; }

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
  "$APP_VENV/bin/python" -m pip install --quiet --upgrade pip
  "$APP_VENV/bin/python" -m pip install --quiet "torch==2.13.0" -e "$REPO_ROOT[dev]"
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
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "label-studio==$LABEL_STUDIO_VERSION"
  touch "$venv/.dynaval-installed"
}
