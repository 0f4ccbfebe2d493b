#!/usr/bin/env bash
# Run the test suite: set up (or reuse) the venv and the browser test's Chromium, then pytest in ASRKIT_TEST_WORKERS parallel
# workers (default 2, whole files per worker; 0 = one process).  Extra arguments go to pytest
# (e.g. `bash tests/run.sh tests/data -k shard`, or `-m "not slow"`).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
. tools/setup_env.sh || exit 1
bash tools/setup_browser.sh   # Chromium + driver for tests/serve/test_browser.py (or one line saying what to install)
workers=${ASRKIT_TEST_WORKERS:-2}
parallel=()
# (--no-loadscope-reorder: xdist would hand out the files with the most tests first; the
# collection order, files with slow tests first (tests/conftest.py), balances the workers)
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
exec python -m pytest "${parallel[@]}" "$@"
