#!/usr/bin/env bash
# The main job: set up (or reuse) the environment, then run the default recipe
# (examples/digits/s0: synthesize a connected-digit corpus, train a conformer on CPU,
# decode the speaker-independent test set and print CER/WER per decoding mode).
# Options go to the recipe, e.g.:  bash run.sh --stage 4 --stop_stage 5
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. tools/setup_env.sh || exit 1
cd examples/digits/s0 && exec bash run.sh "$@"
