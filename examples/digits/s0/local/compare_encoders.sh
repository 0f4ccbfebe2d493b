#!/usr/bin/env bash
# The encoder comparison of docs/recipes.md ("Comparing encoders"): every encoder config of
# conf/ (the default conformer and, at its parameter count, the Branchformer, E-Branchformer,
# Squeezeformer and Efficient Conformer) trained and decoded by run.sh once per seed, one after
# the other, then the table of tools/encoder_table.py.
#
#   bash local/compare_encoders.sh [--encoders "conformer branchformer ..."] [--seeds "1 2 3"]
#       [--exp exp] [--test_set test] [run.sh options ...]
#
# Each encoder E and seed S: bash run.sh --stage 4 --stop_stage 4 --train_config
# conf/train_E_cpu.yaml --dir <exp>/E_seedS --train_overrides "seed=S" (training: with real
# speakers, the default, both phases), its output in <exp>/E_seedS/run_train.log; then
# --stage 5 --stop_stage 5 (average, decode, score), its output -- the decodes' RTF lines -- in
# <exp>/E_seedS/run_decode.log.  A run whose decode log has its RTF and whose scores exist is
# skipped; an interrupted one resumes (run.sh's stages are idempotent, training restarts from its
# newest checkpoint).  The data stages (0-3) run first, with the same run.sh options, only when
# the data is not there yet (data/dict/units.txt, data/train/global_cmvn, data/test/*.list).
# The encoder "conformer_rel_pos" is the default conformer with WeNet's rel_pos positions (the
# Squeezeformer and the Efficient Conformer take no other): a control, not in the default list.
# Other options go to run.sh as they are (e.g. --real_speakers "" for the synthetic corpus only;
# --train_overrides "max_epoch=1" is joined with the seed's).  At the end the table goes to
# stdout and <exp>/encoders.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. ./path.sh
encoders="conformer branchformer e_branchformer squeezeformer efficient_conformer"
seeds="1 2 3"
exp=exp
test_set=test
train_overrides=""
recipe_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --encoders|--seeds|--exp|--test_set|--train_overrides)
      [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; exit 2; }
      name=${1#--}; printf -v "$name" '%s' "$2"; shift 2 ;;
    --train_config|--dir|--stage|--stop_stage)
      echo "$0: $1 is this script's to choose (--encoders, --exp)" >&2; exit 2 ;;
    --help|-h) sed -n '2,22p' "$0"; exit 0 ;;
    *) recipe_opts+=("$1"); shift ;;
  esac
done
say() { echo "[$(date +%H:%M:%S)] compare_encoders: $*" >&2; }

config_of() {  # the config and the extra overrides of an encoder name
  case "$1" in
    conformer) echo "conf/train_conformer_cpu.yaml" ;;
    conformer_rel_pos) echo "conf/train_conformer_cpu.yaml encoder_conf.pos_enc_layer_type=rel_pos" ;;
    *) echo "conf/train_${1}_cpu.yaml" ;;
  esac
}
for e in $encoders; do  # (every config checked before hours of training start)
  read -r config _ <<< "$(config_of "$e")"
  [ -f "$config" ] || { echo "$0: no config $config for the encoder '$e'" >&2; exit 2; }
done
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || { echo "$0: --seeds takes whole numbers, not '$s'" >&2; exit 2; }; done

if [ -s data/dict/units.txt ] && [ -s data/train/global_cmvn ] && compgen -G "data/$test_set/*.list" > /dev/null; then
  say "data/ is prepared: stages 0-3 skipped"
else
  say "stages 0-3 (data) first"
  bash run.sh --stop_stage 3 "${recipe_opts[@]}"
fi

runs=()
for e in $encoders; do
  read -r config extra <<< "$(config_of "$e")"
  for s in $seeds; do
    dir=$exp/${e}_seed$s
    runs+=("$dir")
    if grep -qs "^RTF " "$dir/run_decode.log" && [ -f "$dir/decode_$test_set/attention_rescoring/cer" ]; then
      say "$dir is done: skipped"; continue
    fi
    mkdir -p "$dir"
    opts=(--train_config "$config" --dir "$dir" --train_overrides "$train_overrides $extra seed=$s" "${recipe_opts[@]}")
    say "$e, seed $s: train -> $dir (log $dir/run_train.log)"
    bash run.sh --stage 4 --stop_stage 4 "${opts[@]}" >> "$dir/run_train.log" 2>&1 \
      || { tail -20 "$dir/run_train.log" >&2; exit 1; }
    say "$e, seed $s: average, decode, score (log $dir/run_decode.log)"
    bash run.sh --stage 5 --stop_stage 5 "${opts[@]}" > "$dir/run_decode.log" 2>&1 \
      || { tail -20 "$dir/run_decode.log" >&2; exit 1; }
  done
done
python tools/encoder_table.py --test_set "$test_set" --out "$exp/encoders.md" "${runs[@]}"
