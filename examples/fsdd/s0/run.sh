#!/usr/bin/env bash
# Real human speech: isolated and connected digits of four speakers of the Free Spoken Digit
# Dataset (8 kHz), one held-out speaker per fold (docs/recipes.md, "Real speech").
#   bash run.sh                                        # fold lucas: train george + jackson, dev nicolas
#   bash run.sh --test_speaker george --dev_speaker lucas --dir exp/fold_george
#   bash run.sh --corpus_dir /data/free-spoken-digit-dataset   # the dataset's own clone (its recordings/)
# Without --corpus_dir, stage 0 unpacks the four speakers shipped in corpora/fsdd (CC BY-SA 4.0,
# corpora/fsdd/README.md); the dataset's other two speakers are a blind test: never train on them.
# Stages are idempotent: a finished stage is skipped; stage 4 resumes (checkpoint=auto).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. ./path.sh || exit 1

. tools/recipe_defaults.sh   # the shared variables and their defaults; this recipe's own values follow
# data: the speakers of each split (every other speaker of the corpus trains)
corpus_dir=                   # empty: corpora/fsdd/recordings.tar.gz unpacked into corpus/fsdd
test_speaker=lucas
dev_speaker=nicolas
train_speakers=               # empty: every other speaker of the corpus; else a word list
connected=200                 # connected utterances per speaker (3-7 takes each; tools/prepare_fsdd.py)
prepare_seed=1
# training
train_config=conf/train_conformer_cpu.yaml
dir=exp/conformer_cpu
# fine-tuning: start from a trained model's encoder, decoder and CTC (WeNet's --enc_init), e.g. the
# digits recipe's ../../digits/s0/exp/conformer_cpu/avg_3.pt (the same units); empty: from scratch
init_checkpoint=
num_workers=1
cpu_nproc_per_node=2
# decoding: isolated takes (SER: one digit each) and connected utterances (CER)
average_num=3
test_sets="test test_connected"

. tools/parse_options.sh || exit 1
set -euo pipefail
. tools/recipe_stages.sh

if run_stage 0; then
  if [ -z "$corpus_dir" ]; then
    corpus_dir=corpus/fsdd
    if [ ! -d "$corpus_dir/recordings" ]; then
      say "0: unpack the shipped recordings ($ASRKIT_ROOT/corpora/fsdd/recordings.tar.gz) into $corpus_dir"
      mkdir -p "$corpus_dir" && tar -xzf "$ASRKIT_ROOT/corpora/fsdd/recordings.tar.gz" -C "$corpus_dir"
    fi
  fi
  say "0: prepare data/{train,dev,dev_connected,test,test_connected} from $corpus_dir (test: $test_speaker, dev: $dev_speaker)"
  # shellcheck disable=SC2086  # train_speakers is a word list
  python tools/prepare_fsdd.py --corpus_dir "$corpus_dir" --out data --test_speakers "$test_speaker" \
    --dev_speakers "$dev_speaker" ${train_speakers:+--train_speakers $train_speakers} --connected "$connected" \
    --seed "$prepare_seed"
fi

run_stage 1 && stage_cmvn 1 config="$train_config"
run_stage 2 && stage_units 2 what="char units" units=data/dict/units.txt
run_stage 3 && stage_data_lists 3 type="$data_type" per_shard="$num_utts_per_shard" -- train dev dev_connected test test_connected
init=()
[ -z "$init_checkpoint" ] || init=(--enc_init "$init_checkpoint" --enc_init_mods "encoder.,decoder.,ctc.")
run_stage 4 && stage_train 4 "${launch[@]}" config="$train_config" dir="$dir" type="$data_type" \
  checkpoint="$checkpoint" workers="$num_workers" threads="$num_threads" overrides="$train_overrides" -- "${init[@]}"

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}
# shellcheck disable=SC2086  # test_sets is a word list
run_stage 5 && stage_average_decode_score 5 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" \
  type="$data_type" -- $test_sets
run_stage 6 && stage_export 6 config="$dir/train.yaml" checkpoint="$decode_checkpoint" out="$dir/final.zip" onnx_dir="$dir/onnx" \
  check_data="data/dev/$(list_name "$data_type")"
if [ "$stop_stage" -ge 5 ]; then serve_hint "$stop_stage" dir="$dir" checkpoint="$decode_checkpoint"; fi
exit 0
