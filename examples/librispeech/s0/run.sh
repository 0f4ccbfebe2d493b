#!/usr/bin/env bash
# LibriSpeech (English read speech, 960 h, openslr 12): conformer CTC/attention with
# sentencepiece units (5000, unigram as in WeNet).
#   bash run.sh --data /export/data/openslr/12            # all stages (0-6), corpus already there
#   bash run.sh --stage -1 --data /export/data/openslr/12 # download the subsets first (about 60 GB)
#   bash run.sh --train_subsets train-clean-100 ...       # train on a part only
# --data is the directory holding LibriSpeech/ (or LibriSpeech itself).  Multi-node: run the
# same command on every node with its own --node_rank, e.g.
#   bash run.sh --stage 4 --stop_stage 4 --num_nodes 2 --node_rank 0 --master_addr 10.0.0.1
# Stages are idempotent: a finished stage is skipped; stage 4 resumes (checkpoint=auto).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. ./path.sh || exit 1

. tools/recipe_defaults.sh   # the shared variables and their defaults; this recipe's own values follow
# data
data=/export/data/openslr/12  # holds LibriSpeech/ (stage -1 downloads into it)
data_url=https://www.openslr.org/resources/12
train_subsets="train-clean-100 train-clean-360 train-other-500"   # combined into data/train
dev_subsets="dev-clean dev-other"                                 # combined into data/dev
test_subsets="test-clean test-other"                              # data/test_clean, data/test_other
# units
nbpe=5000                     # sentencepiece vocabulary size
bpe_type=unigram              # unigram (WeNet's LibriSpeech choice) | bpe
# decoding
average_num=30
decode_ctc_weight=0.5          # CTC weight in attention_rescoring (WeNet's recipe value)
test_sets=                    # default: the prepared test subsets ("test_clean test_other")

. tools/parse_options.sh || exit 1
set -euo pipefail
test_sets=${test_sets:-$(echo "$test_subsets" | tr -- - _)}
. tools/recipe_stages.sh

if run_stage -1; then
  say "-1: download and extract LibriSpeech into $data"
  # shellcheck disable=SC2086  # the subset variables are word lists
  bash local/download_and_untar.sh "$data" "$data_url" $train_subsets $dev_subsets $test_subsets
fi

if run_stage 0; then
  say "0: prepare data/{train,dev,${test_sets// /,}} from $data"
  python local/librispeech_data_prep.py --train_subsets "$train_subsets" --dev_subsets "$dev_subsets" \
    --test_subsets "$test_subsets" "$data" data
fi

run_stage 1 && stage_cmvn 1 config="$train_config"
run_stage 2 && stage_units 2 what="sentencepiece units ($bpe_type, $nbpe)" units=data/dict/units.txt -- \
  --bpe "$nbpe" --bpe-type "$bpe_type" --bpe-model data/dict/bpe.model

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
