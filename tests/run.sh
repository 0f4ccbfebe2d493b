#!/usr/bin/env bash
# Run the test suite: set up (or reuse) the venv, then pytest.  Extra arguments go to
# pytest (e.g. `bash tests/run.sh tests/data -k shard`, or `-m "not slow"`).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
. tools/setup_env.sh || exit 1
exec python -m pytest "$@"
