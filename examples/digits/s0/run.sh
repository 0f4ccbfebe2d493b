#!/usr/bin/env bash
# Connected digits (synthesized with espeak-ng, speaker-independent splits): the default recipe.
#   bash run.sh                               # all stages
#   bash run.sh --stage 4 --stop_stage 5      # train, then average + decode + score
# Multi-node: run the same command on every node with its own --node_rank, e.g.
#   bash run.sh --stage 4 --stop_stage 4 --num_nodes 2 --node_rank 0 --master_addr 10.0.0.1
# Stages are idempotent: a finished stage is skipped; stage 4 resumes (checkpoint=auto).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. ./path.sh || exit 1

stage=0
stop_stage=6
# data
corpus_dir=corpus/digits
train_utts=4000; dev_utts=300; test_utts=300
data_type=raw                 # raw | shard
num_utts_per_shard=1000
# training
train_config=conf/train_conformer_cpu.yaml
dir=exp/conformer_cpu
checkpoint=auto               # auto: resume from the newest valid checkpoint in $dir, if any
num_workers=1
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
average_num=3
average_mode=best             # best (lowest CV loss) | last
decode_checkpoint=            # default: $dir/avg_${average_num}.pt
decode_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
beam_size=10
decode_batch_size=16
test_sets="test"

. tools/parse_options.sh || exit 1
set -euo pipefail
. tools/recipe_stages.sh

if run_stage 0; then
  say "0: synthesize the corpus into $corpus_dir and prepare data/{train,dev,test}"
  python tools/synthesize_corpus.py --out "$corpus_dir" --train "$train_utts" --dev "$dev_utts" --test "$test_utts"
  for s in train dev test; do
    mkdir -p "data/$s"
    for f in wav.scp text utt2spk; do cmp -s "$corpus_dir/$s/$f" "data/$s/$f" || cp "$corpus_dir/$s/$f" "data/$s/$f"; done
  done
fi

run_stage 1 && stage_cmvn

if run_stage 2; then
  if [ -s data/dict/units.txt ]; then say "2: data/dict/units.txt exists, skipped"; else
    say "2: character units"
    mkdir -p data/dict
    python tools/make_units.py data/train/text data/dict/units.txt
  fi
fi

run_stage 3 && stage_data_lists train dev test
run_stage 4 && stage_train

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

run_stage 5 && stage_average_decode_score
run_stage 6 && stage_export
exit 0
