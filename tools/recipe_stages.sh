# Stages every asrkit recipe shares (sourced by examples/*/s0/run.sh after parse_options.sh).
# Each function reads the recipe's variables (train_config, dir, data_type, num_nodes, ...)
# and is idempotent: finished work (a CMVN file, a list, an average, an export) is skipped.
#
#   stage_cmvn                 data/train/global_cmvn from data/train/wav.scp
#   stage_units WHAT UNITS [OPT...]  units from data/train/text (rebuilt when OPTs or the text change)
#   stage_data_lists SET...    data/<set>/data.list (+ data.shards.list with data_type=shard)
#   stage_train [ARG...]       torchrun -m asrkit.bin.train (1..N nodes, resumes with checkpoint=auto)
#                              on data/${train_set:-train}; num_threads (if set) fixes each process's
#                              intra-op threads; ARGs go to train.py (e.g. --max_steps N, --enc_init CKPT)
#   stage_average_decode_score average checkpoints, decode $test_sets, score (CER and WER);
#                              decode_ctc_weight (default 0.3; WeNet decodes AISHELL with 0.5) and
#                              decode_device (default cpu; cuda on a GPU node) may be set
#   stage_export               TorchScript $dir/final.zip

say() { echo "[$(date +%H:%M:%S)] stage $*" >&2; }
run_stage() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }

# stale TARGET FILE...: TARGET is missing/empty, or one of the FILEs that exist is newer than it.
stale() {
  local target=$1 f; shift
  [ -s "$target" ] || return 0
  for f in "$@"; do [ -e "$f" ] && [ "$f" -nt "$target" ] && return 0; done
  return 1
}

list_name() { if [ "$data_type" = shard ]; then echo data.shards.list; else echo data.list; fi; }

stage_cmvn() {
  if [ -s data/train/global_cmvn ]; then say "1: data/train/global_cmvn exists, skipped"; return; fi
  say "1: global CMVN statistics"
  python tools/compute_cmvn_stats.py --train_config "$train_config" --in_scp data/train/wav.scp \
    --out_cmvn data/train/global_cmvn --num_workers "$(nproc)"
}

# stage_units DESCRIPTION UNITS [make_units.py option...]: units from data/train/text.
# The one rule for "rebuild": UNITS.stamp records the options and a digest of the training
# transcripts it was built from; other options (--bpe 30 instead of 50) or other transcripts
# rebuild it, the same ones skip.
stage_units() {
  local what=$1 units=$2; shift 2
  local want model="" a prev=""; want="$* $(sha256sum data/train/text | cut -c1-16)"
  for a in "$@"; do [ "$prev" = --bpe-model ] && model=$a; prev=$a; done
  if [ -s "$units" ] && [ "$(cat "$units.stamp" 2>/dev/null)" = "$want" ] && { [ -z "$model" ] || [ -s "$model" ]; }; then
    say "2: $units is up to date: $what, skipped"; return
  fi
  say "2: $what -> $units"
  mkdir -p "$(dirname "$units")"
  python tools/make_units.py "$@" data/train/text "$units"
  echo "$want" > "$units.stamp"
}

stage_data_lists() {
  say "3: data lists ($data_type)"
  local s
  for s in "$@"; do
    [ -s "data/$s/data.list" ] || python tools/make_raw_list.py "data/$s/wav.scp" "data/$s/text" "data/$s/data.list"
    if [ "$data_type" = shard ] && [ ! -s "data/$s/data.shards.list" ]; then
      python tools/make_shard_list.py --num_utts_per_shard "$num_utts_per_shard" --num_threads "$(nproc)" \
        "data/$s/data.list" "data/$s/shards" "data/$s/data.shards.list"
    fi
  done
}

# torchrun on this node: nproc_per_node defaults to the GPU count, else to
# cpu_nproc_per_node (default 1) capped at the CPU count;
# HOST_NODE_ADDR=host:port selects c10d rendezvous instead of master_addr/master_port.
stage_train() {
  local nproc=${nproc_per_node:-}
  [ -n "$nproc" ] || nproc=$(python -c "import os, torch
print(torch.cuda.device_count() or min(${cpu_nproc_per_node:-1}, os.cpu_count()))")
  local rendezvous
  if [ -n "${HOST_NODE_ADDR:-}" ]; then
    rendezvous=(--rdzv_backend c10d --rdzv_endpoint "$HOST_NODE_ADDR" --rdzv_id "asrkit_$(basename "$dir")")
  else
    rendezvous=(--node_rank "$node_rank" --master_addr "$master_addr" --master_port "$master_port")
  fi
  local overrides=(--override "dataset_conf.num_workers=$num_workers") o
  for o in $train_overrides; do overrides+=(--override "$o"); done
  local resume=(); [ -n "$checkpoint" ] && resume=(--checkpoint "$checkpoint")
  local threads=(); [ -n "${num_threads:-}" ] && threads=(--num_threads "$num_threads")
  local lst; lst=$(list_name)
  say "4: train $train_config on data/${train_set:-train} -> $dir ($num_nodes node(s) x $nproc process(es), node_rank $node_rank)"
  python -m torch.distributed.run --nnodes "$num_nodes" --nproc_per_node "$nproc" "${rendezvous[@]}" \
    --max_restarts "${max_restarts:-0}" \
    -m asrkit.bin.train --config "$train_config" --train_data "data/${train_set:-train}/$lst" \
    --cv_data "data/dev/$lst" --model_dir "$dir" "${resume[@]}" "${threads[@]}" "${overrides[@]}" "$@"
}

stage_average_decode_score() {
  # An average (avg_*.pt) is redone when any epoch checkpoint is newer: training longer and
  # rerunning stage 5 must decode the new model, not the old average.
  local averaged=0
  case "$(basename "$decode_checkpoint")" in avg_*.pt) averaged=1 ;; esac
  if [ ! -s "$decode_checkpoint" ] || { [ "$averaged" = 1 ] && stale "$decode_checkpoint" "$dir"/epoch_*.pt; }; then
    say "5: average $average_num checkpoints ($average_mode) -> $decode_checkpoint"
    python -m asrkit.bin.average_model --model_dir "$dir" --num "$average_num" --mode "$average_mode" \
      --dst "$decode_checkpoint"
  fi
  local s lst; lst=$(list_name)
  for s in $test_sets; do
    local result_dir="$dir/decode_$s"
    say "5: decode $s ($decode_modes) -> $result_dir"
    # shellcheck disable=SC2086  # decode_modes is a word list
    python -m asrkit.bin.recognize --config "$dir/train.yaml" --checkpoint "$decode_checkpoint" \
      --data "data/$s/$lst" --modes $decode_modes --beam_size "$beam_size" \
      --batch_size "$decode_batch_size" --ctc_weight "${decode_ctc_weight:-0.3}" \
      --device "${decode_device:-cpu}" --result_dir "$result_dir"
    python tools/score_decodes.py --ref "data/$s/text" --decode_dir "$result_dir"
  done
}

stage_export() {
  if ! stale "$dir/final.zip" "$decode_checkpoint"; then
    say "6: $dir/final.zip exists and is newer than $decode_checkpoint, skipped"; return
  fi
  say "6: export TorchScript -> $dir/final.zip"
  python -m asrkit.bin.export --config "$dir/train.yaml" --checkpoint "$decode_checkpoint" \
    --output "$dir/final.zip"
}
