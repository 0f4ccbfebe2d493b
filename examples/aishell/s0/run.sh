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

run_stage 1 && stage_cmvn 1 config="$train_config"
run_stage 2 && stage_units 2 what="character units" units=data/dict/units.txt

# shellcheck disable=SC2086  # test_sets is a word list
run_stage 3 && stage_data_lists 3 type="$data_type" per_shard="$num_utts_per_shard" -- train dev $test_sets
run_stage 4 && stage_train 4 "${launch[@]}" config="$train_config" dir="$dir" type="$data_type" \
  checkpoint="$checkpoint" workers="$num_workers" threads="$num_threads" overrides="$train_overrides"

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

# shellcheck disable=SC2086  # test_sets is a word list
run_stage 5 && stage_average_decode_score 5 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" \
  type="$data_type" -- $test_sets
run_stage 6 && stage_export 6 config="$dir/train.yaml" checkpoint="$decode_checkpoint" out="$dir/final.zip" onnx_dir="$dir/onnx" \
  check_data="data/dev/$(list_name "$data_type")"
exit 0
