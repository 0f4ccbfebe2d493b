#!/usr/bin/env bash
# Create or reuse the project's virtual environment and install what is missing.
# Sourced by run.sh and tests/run.sh:   . tools/setup_env.sh
#
#   ASRKIT_VENV   where the venv lives (default: <repo>/.venv)
#   PYTHON        interpreter used to create it (default: python3.11, else python3)
#
# Installs requirements.txt only when it changed since the last install (a stamp in the
# venv records its hash), then asrkit itself in editable mode (console scripts), and
# espeak-ng + sox with apt-get when they are missing and we are root.  Exports PATH so
# the venv's python comes first.
# Sourced with `. tools/setup_env.sh || exit 1`: bash ignores `set -e` inside a command
# that is part of an `||` list, so every step checks its own status and a failed step
# returns 1 at once (a full disk or a network error must not let a recipe start).
__asrkit_setup() {
  local root venv python hash
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${ASRKIT_VENV:-$root/.venv}"
  python="${PYTHON:-$(command -v python3.11 || command -v python3)}"

  if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating virtual environment $venv ($("$python" --version))" >&2
    "$python" -m venv "$venv" || { echo "[setup] error: could not create the virtual environment $venv" >&2; return 1; }
  fi

  hash=$(cat "$root/requirements.txt" "$root/setup.py" | sha256sum | cut -c1-16)
  if [ "$(cat "$venv/.asrkit-installed" 2>/dev/null)" != "$hash" ]; then
    echo "[setup] installing requirements (torch is a large download the first time) ..." >&2
    "$venv/bin/python" -m pip install -q --upgrade pip >&2 \
      && "$venv/bin/python" -m pip install -q -r "$root/requirements.txt" >&2 \
      && "$venv/bin/python" -m pip install -q --no-deps -e "$root" >&2 \
      || { echo "[setup] error: installing the requirements into $venv failed (pip's message is above); fix that and rerun" >&2; return 1; }
    echo "$hash" > "$venv/.asrkit-installed" || return 1
  fi

  if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "[setup] installing espeak-ng and sox with apt-get ..." >&2
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox >&2 \
        || { echo "[setup] error: apt-get could not install espeak-ng and sox" >&2; return 1; }
    else
      echo "[setup] warning: espeak-ng and/or sox are missing; the synthesized corpus needs them:" >&2
      echo "        sudo apt-get install -y espeak-ng sox   (or brew install espeak-ng sox)" >&2
    fi
  fi

  export PATH="$venv/bin:$PATH"
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
}
__asrkit_setup
__asrkit_status=$?
unset -f __asrkit_setup
return $__asrkit_status 2>/dev/null || exit $__asrkit_status
