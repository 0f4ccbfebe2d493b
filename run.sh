#!/usr/bin/env bash
# The main job: set up (or reuse) the environment, then run the default recipe
# (examples/digits/s0: synthesize a connected-digit corpus, train a conformer on CPU,
# decode and print CER/WER).  Options are passed to the recipe, e.g.
#   bash run.sh --stage 4 --stop_stage 5
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. tools/setup_env.sh || exit 1
recipe=examples/digits/s0/run.sh
if [ ! -f "$recipe" ]; then
  echo "asrkit is set up ($(python -c 'import asrkit; print(asrkit.__version__)'), venv: $ASRKIT_VENV)."
  echo "The default recipe ($recipe) has not landed yet; nothing else to run."
  exit 0
fi
cd "$(dirname "$recipe")" && exec bash run.sh "$@"
