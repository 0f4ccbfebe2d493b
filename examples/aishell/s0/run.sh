#!/usr/bin/env bash
# AISHELL-1 (Mandarin, 178 h, openslr 33): conformer CTC/attention with character units.
#   bash run.sh --data /export/data/openslr/33            # all stages (0-6), corpus already there
#   bash run.sh --stage -1 --data /export/data/openslr/33 # download it first (about 15 GB)
#   bash run.sh --stage 4 --stop_stage 5                  # train, then average + decode + score
# --data is the directory holding data_aishell/ (or data_aishell itself).  Multi-node: run the
# same command on every node with its own --node_rank, e.g.
#   bash run.sh --stage 4 --stop_stage 4 --num_nodes 2 --node_rank 0 --master_addr 10.0.0.1
# Stages are idempotent: a finished stage is skipped; stage 4 resumes (checkpoint=auto).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. ./path.sh || exit 1

. tools/recipe_defaults.sh   # the shared variables and their defaults; this recipe's own values follow
# data
data=/export/data/openslr/33  # holds data_aishell/ (stage -1 downloads into it)
data_url=https://www.openslr.org/resources/33
# decoding
average_num=20
decode_ctc_weight=0.5          # CTC weight in attention_rescoring (WeNet's recipe value)

. tools/parse_options.sh || exit 1
set -euo pipefail
. tools/recipe_stages.sh

if run_stage -1; then
  say "-1: download and extract AISHELL-1 into $data"
  bash local/download_and_untar.sh "$data" "$data_url"
fi

if run_stage 0; then
  say "0: prepare data/{train,dev,test} from $data"
  python local/aishell_data_prep.py "$data" data
fi

run_stage 1 && stage_cmvn

run_stage 2 && stage_units "character units" data/dict/units.txt

run_stage 3 && stage_data_lists train dev $test_sets
run_stage 4 && stage_train

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

run_stage 5 && stage_average_decode_score
run_stage 6 && stage_export
exit 0
