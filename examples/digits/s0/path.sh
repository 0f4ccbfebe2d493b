# Environment of the recipe: the asrkit checkout (three levels up, or $ASRKIT_ROOT when the
# recipe directory was copied elsewhere), its venv if present, and jemalloc if installed.
ASRKIT_ROOT="${ASRKIT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}"
if [ -x "$ASRKIT_ROOT/.venv/bin/python" ] && [ -z "${VIRTUAL_ENV:-}" ]; then
  export PATH="$ASRKIT_ROOT/.venv/bin:$PATH"
fi
export PYTHONPATH="$ASRKIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
. "$ASRKIT_ROOT/tools/preload_jemalloc.sh"   # (jemalloc when installed: tools/preload_jemalloc.sh)
[ -e tools ] || ln -s "$ASRKIT_ROOT/tools" tools
