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
set -e
__asrkit_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ASRKIT_VENV="${ASRKIT_VENV:-$__asrkit_root/.venv}"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=$(command -v python3.11 || command -v python3)
fi

if [ ! -x "$ASRKIT_VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $ASRKIT_VENV ($("$PYTHON" --version))" >&2
  "$PYTHON" -m venv "$ASRKIT_VENV"
fi

__req_hash=$(cat "$__asrkit_root/requirements.txt" "$__asrkit_root/setup.py" | sha256sum | cut -c1-16)
if [ "$(cat "$ASRKIT_VENV/.asrkit-installed" 2>/dev/null)" != "$__req_hash" ]; then
  echo "[setup] installing requirements (torch is a large download the first time) ..." >&2
  "$ASRKIT_VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$ASRKIT_VENV/bin/python" -m pip install -q -r "$__asrkit_root/requirements.txt" >&2
  "$ASRKIT_VENV/bin/python" -m pip install -q --no-deps -e "$__asrkit_root" >&2
  echo "$__req_hash" > "$ASRKIT_VENV/.asrkit-installed"
fi

if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] installing espeak-ng and sox with apt-get ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox >&2
  else
    echo "[setup] warning: espeak-ng and/or sox are missing; the synthesized corpus needs them:" >&2
    echo "        sudo apt-get install -y espeak-ng sox   (or brew install espeak-ng sox)" >&2
  fi
fi

export PATH="$ASRKIT_VENV/bin:$PATH"
export PYTHONPATH="$__asrkit_root${PYTHONPATH:+:$PYTHONPATH}"
unset __asrkit_root __req_hash
set +e
