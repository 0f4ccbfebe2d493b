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

stage=0
stop_stage=6
# data
data=/export/data/openslr/12  # holds LibriSpeech/ (stage -1 downloads into it)
data_url=https://www.openslr.org/resources/12
train_subsets="train-clean-100 train-clean-360 train-other-500"   # combined into data/train
dev_subsets="dev-clean dev-other"                                 # combined into data/dev
test_subsets="test-clean test-other"                              # data/test_clean, data/test_other
data_type=raw                 # raw | shard
num_utts_per_shard=1000
# units
nbpe=5000                     # sentencepiece vocabulary size
bpe_type=unigram              # unigram (WeNet's LibriSpeech choice) | bpe
# training
train_config=conf/train_conformer.yaml
dir=exp/conformer
checkpoint=auto               # auto: resume from the newest valid checkpoint in $dir, if any
num_workers=4
num_threads=                  # intra-op threads per training process (default: the cores it may use / processes per node)
train_overrides=""            # e.g. "max_epoch=2 accum_grad=2" (each a KEY.PATH=VALUE)
# launch (torchrun): nproc_per_node defaults to the GPU count, or 1 process on CPU
num_nodes=1
max_restarts=0                # torchrun restarts the whole node's workers this often after a failure
node_rank=0
nproc_per_node=
master_addr=127.0.0.1
master_port=29500
HOST_NODE_ADDR=${HOST_NODE_ADDR:-}   # host:port for c10d rendezvous (instead of master_addr/port)
# decoding
average_num=30
average_mode=best             # best (lowest CV loss) | last
decode_checkpoint=            # default: $dir/avg_${average_num}.pt
decode_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
beam_size=10
decode_batch_size=16
decode_ctc_weight=0.5          # CTC weight in attention_rescoring (WeNet's recipe value)
decode_device=cpu             # cuda to decode on a GPU
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

if run_stage 2; then
  # data/dict/bpe.stamp records the pieces and type the model was trained with: another
  # --nbpe/--bpe_type trains a new model instead of silently keeping the old one
  if [ -s data/dict/units.txt ] && [ -s data/dict/bpe.model ] \
     && [ "$(cat data/dict/bpe.stamp 2>/dev/null)" = "$nbpe $bpe_type" ]; then
    say "2: data/dict/{units.txt,bpe.model} exist ($bpe_type, $nbpe), skipped"
  else
    say "2: sentencepiece units ($bpe_type, $nbpe)"
    mkdir -p data/dict
    python tools/make_units.py --bpe "$nbpe" --bpe-type "$bpe_type" --bpe-model data/dict/bpe.model \
      data/train/text data/dict/units.txt
    echo "$nbpe $bpe_type" > data/dict/bpe.stamp
  fi
fi

run_stage 3 && stage_data_lists train dev $test_sets
run_stage 4 && stage_train

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

run_stage 5 && stage_average_decode_score
run_stage 6 && stage_export
exit 0
