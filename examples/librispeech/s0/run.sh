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

run_stage 1 && stage_cmvn

run_stage 2 && stage_units "sentencepiece units ($bpe_type, $nbpe)" data/dict/units.txt \
  --bpe "$nbpe" --bpe-type "$bpe_type" --bpe-model data/dict/bpe.model

run_stage 3 && stage_data_lists train dev $test_sets
run_stage 4 && stage_train

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

run_stage 5 && stage_average_decode_score
run_stage 6 && stage_export
exit 0
