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
train_overrides=""            # e.g. "max_epoch=2 accum_grad=2" (each a KEY.PATH=VALUE)
# launch (torchrun): nproc_per_node defaults to the GPU count, or 1 process on CPU
num_nodes=1
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

run_stage() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
say() { echo "[$(date +%H:%M:%S)] stage $*" >&2; }

if run_stage 0; then
  say "0: synthesize the corpus into $corpus_dir and prepare data/{train,dev,test}"
  python tools/synthesize_corpus.py --out "$corpus_dir" --train "$train_utts" --dev "$dev_utts" --test "$test_utts"
  for s in train dev test; do
    mkdir -p "data/$s"
    for f in wav.scp text utt2spk; do cmp -s "$corpus_dir/$s/$f" "data/$s/$f" || cp "$corpus_dir/$s/$f" "data/$s/$f"; done
  done
fi

if run_stage 1; then
  if [ -s data/train/global_cmvn ]; then say "1: data/train/global_cmvn exists, skipped"; else
    say "1: global CMVN statistics"
    python tools/compute_cmvn_stats.py --train_config "$train_config" --in_scp data/train/wav.scp \
      --out_cmvn data/train/global_cmvn --num_workers "$(nproc)"
  fi
fi

if run_stage 2; then
  if [ -s data/dict/units.txt ]; then say "2: data/dict/units.txt exists, skipped"; else
    say "2: character units"
    mkdir -p data/dict
    python tools/make_units.py data/train/text data/dict/units.txt
  fi
fi

if run_stage 3; then
  say "3: data lists ($data_type)"
  for s in train dev test; do
    [ -s "data/$s/data.list" ] || python tools/make_raw_list.py "data/$s/wav.scp" "data/$s/text" "data/$s/data.list"
    if [ "$data_type" = shard ] && [ ! -s "data/$s/data.shards.list" ]; then
      python tools/make_shard_list.py --num_utts_per_shard "$num_utts_per_shard" --num_threads "$(nproc)" \
        "data/$s/data.list" "data/$s/shards" "data/$s/data.shards.list"
    fi
  done
fi
list_name=data.list; [ "$data_type" = shard ] && list_name=data.shards.list

if run_stage 4; then
  if [ -z "$nproc_per_node" ]; then
    nproc_per_node=$(python -c "import torch; print(torch.cuda.device_count() or 1)")
  fi
  if [ -n "$HOST_NODE_ADDR" ]; then
    rendezvous=(--rdzv_backend c10d --rdzv_endpoint "$HOST_NODE_ADDR" --rdzv_id asrkit_digits)
  else
    rendezvous=(--node_rank "$node_rank" --master_addr "$master_addr" --master_port "$master_port")
  fi
  overrides=(--override "dataset_conf.num_workers=$num_workers")
  for o in $train_overrides; do overrides+=(--override "$o"); done
  say "4: train $train_config -> $dir ($num_nodes node(s) x $nproc_per_node process(es), node_rank $node_rank)"
  resume=(); [ -n "$checkpoint" ] && resume=(--checkpoint "$checkpoint")
  python -m torch.distributed.run --nnodes "$num_nodes" --nproc_per_node "$nproc_per_node" "${rendezvous[@]}" \
    -m asrkit.bin.train --config "$train_config" --train_data "data/train/$list_name" \
    --cv_data "data/dev/$list_name" --model_dir "$dir" "${resume[@]}" "${overrides[@]}"
fi

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

if run_stage 5; then
  if [ ! -s "$decode_checkpoint" ]; then
    say "5: average $average_num checkpoints ($average_mode) -> $decode_checkpoint"
    python -m asrkit.bin.average_model --model_dir "$dir" --num "$average_num" --mode "$average_mode" \
      --dst "$decode_checkpoint"
  fi
  for s in $test_sets; do
    result_dir="$dir/decode_$s"
    say "5: decode $s ($decode_modes) -> $result_dir"
    python -m asrkit.bin.recognize --config "$dir/train.yaml" --checkpoint "$decode_checkpoint" \
      --data "data/$s/$list_name" --modes $decode_modes --beam_size "$beam_size" \
      --batch_size "$decode_batch_size" --result_dir "$result_dir"
    python tools/score_decodes.py --ref "data/$s/text" --decode_dir "$result_dir"
  done
fi

if run_stage 6; then
  if [ -s "$dir/final.zip" ]; then say "6: $dir/final.zip exists, skipped"; else
    say "6: export TorchScript -> $dir/final.zip"
    python -m asrkit.bin.export --config "$dir/train.yaml" --checkpoint "$decode_checkpoint" \
      --output "$dir/final.zip"
  fi
fi
