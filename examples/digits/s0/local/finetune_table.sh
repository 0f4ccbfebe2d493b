#!/usr/bin/env bash
# The fine-tuning table of docs/training.md: the default run's first-phase (synthetic) model
# adapted to three real speakers in each way asrkit offers, tested on the fourth, who none of
# them heard (a leave-one-speaker-out fold), and on the synthetic test (what it forgot).
#
#   bash examples/digits/s0/local/finetune_table.sh [--test_speaker lucas] [--steps 180] [--out exp/finetune_table]
#       [--variants "full frozen_encoder frozen_decoder lora4 lora16"] [--max_takes N]
#       [--resume_check "lora4 frozen_encoder"] [--folds "george jackson lucas nicolas"]
#
# --folds: one fold per speaker named (each into <out>/<speaker>; the resume checks in the
# --test_speaker's fold only), then <out>/folds.md: each variant's SER per fold, mean and worst.
#
# Needs the default run's first phase (bash run.sh --stop_stage 4, or its exp/conformer_cpu/synthetic/
# avg_3.pt) and its data (data/train, data/dev, data/test).  Every variant trains --steps optimizer
# steps from that model (one process, 2 threads; the same schedule: NoamHoldAnnealing, warmup 20,
# hold 60, peak lr 0.001 -- 0.005 for the LoRA adapters, which start at zero), with the recipe's
# second-phase augmentation, and decodes its last checkpoint (attention_rescoring and
# ctc_greedy_search).  "+ synthetic": the same steps on the real speakers and the synthetic corpus
# mixed half and half (--train_data real.list:0.5 synthetic.list:0.5).  Writes <out>/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. ./path.sh
test_speaker=lucas
steps=180
out=exp/finetune_table
base=exp/conformer_cpu/synthetic/avg_3.pt
variants="full frozen_encoder frozen_decoder lora4 lora16"
max_takes=                    # N: each speaker's first N takes of each digit (a quick trial)
resume_check="lora4 frozen_encoder"  # also trained stopped at half the steps and resumed: equal weights?
folds=
. tools/parse_options.sh
if [ -n "$folds" ]; then
  for s in $folds; do
    check=""; [ "$s" != "$test_speaker" ] || check=$resume_check
    bash local/finetune_table.sh --test_speaker "$s" --out "$out/$s" --steps "$steps" --variants "$variants" \
      --resume_check "$check" ${max_takes:+--max_takes "$max_takes"} > "$out.$s.log" 2>&1 \
      || { tail -5 "$out.$s.log"; exit 1; }
  done
  # shellcheck disable=SC2086  # folds is a word list
  python - "$out" "$steps" "$variants" $folds <<'PY' | tee "$out/folds.md"
import statistics
import sys
from pathlib import Path
from tools.seed_summary import read_total
out, steps, variants, folds = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(), sys.argv[4:]
print(f"| variant | data | isolated SER % ({', '.join(folds)}) | mean | worst | connected CER % mean / worst "
      f"| synthetic test CER % mean |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
for variant in variants:
    for mix, shown in (("real", "real"), ("mixed", "+ synthetic")):
        def rates(test, what):
            return [read_total(out / fold / f"{variant}_{mix}" / f"decode_{test}_step{steps}" / "attention_rescoring"
                               / "cer", what) for fold in folds]
        ser, cer, synthetic = rates("test", "SER"), rates("test_connected", "CER"), rates("synthetic", "CER")
        print(f"| {variant} | {shown} | {' / '.join(f'{x:.1f}' for x in ser)} | **{statistics.fmean(ser):.1f}** | "
              f"{max(ser):.1f} | {statistics.fmean(cer):.1f} / {max(cer):.1f} | {statistics.fmean(synthetic):.2f} |")
PY
  exit
fi
[ -f "$base" ] || { echo "$0: no first-phase model $base (run bash run.sh --stop_stage 4 first)" >&2; exit 2; }
real_speakers="george jackson lucas nicolas"
train_speakers=$(echo " $real_speakers " | sed "s/ $test_speaker / /; s/^ *//; s/ *$//")
data=$out/data
if [ ! -f "$data/train/data.list" ]; then
  python tools/prepare_fsdd.py --corpus_dir corpus/fsdd --out "$data" --train_speakers $train_speakers \
    --test_speakers "$test_speaker" --connected 200 --seed 1 ${max_takes:+--max_takes $max_takes}
  for s in train test test_connected; do
    python tools/make_raw_list.py "$data/$s/wav.scp" "$data/$s/text" "$data/$s/data.list"
  done
fi
flags_of() {  # the fine-tuning flags of a variant
  case $1 in
    full) echo "" ;;
    frozen_encoder) echo "--freeze_modules encoder." ;;
    frozen_decoder) echo "--freeze_modules decoder." ;;
    lora4|lora16) echo "--use_lora --only_optimize_lora --lora_rank ${1#lora} --lora_alpha ${1#lora}
      --lora_modules encoder.encoders,decoder.decoders --override optim_conf.lr=0.005" ;;
  esac
}
overrides="max_epoch=100 optim_conf.lr=0.001 scheduler=NoamHoldAnnealing scheduler_conf.warmup_steps=20
  scheduler_conf.hold_steps=60 scheduler_conf.max_steps=$steps scheduler_conf.decay_rate=1.0
  scheduler_conf.min_lr=1.0e-5 save_interval=$steps log_interval=20 dataset_conf.band_limit=true dataset_conf.volume_perturb=true
  dataset_conf.volume_perturb_conf.scale_low=0.05 dataset_conf.volume_perturb_conf.scale_high=6.0
  dataset_conf.volume_perturb_conf.scale_distribution=log_uniform dataset_conf.fbank_conf.dither=0.0
  dataset_conf.spec_aug_conf.max_t_fraction=0.2"
override_args=(); for o in $overrides; do override_args+=(--override "$o"); done
rows=()
for variant in $variants; do
  for mix in real mixed; do
    dir=$out/${variant}_$mix
    train_data=("$data/train/data.list")
    [ "$mix" = real ] || train_data=("$data/train/data.list:0.5" "data/train/data.list:0.5")
    if [ ! -f "$dir/step_$steps.pt" ]; then
      # shellcheck disable=SC2046  # the flags are words
      /usr/bin/time -f "%e %M" -o "$dir.time" python -m asrkit.bin.train --config conf/train_conformer_cpu.yaml \
        --train_data "${train_data[@]}" --cv_data data/dev/data.list --model_dir "$dir" --num_threads 2 \
        --enc_init "$base" --enc_init_mods cmvn.,encoder.,decoder.,ctc. --max_steps "$steps" \
        "${override_args[@]}" $(flags_of "$variant") > "$dir.log" 2>&1 || { tail -5 "$dir.log"; exit 1; }
    fi
    for s in test test_connected synthetic; do
      list=$data/$s/data.list text=$data/$s/text
      [ "$s" != synthetic ] || { list=data/test/data.list; text=data/test/text; }
      result=$dir/decode_${s}_step$steps
      [ -f "$result/attention_rescoring/cer" ] || {
        python -m asrkit.bin.recognize --config "$dir/train.yaml" --checkpoint "$dir/step_$steps.pt" --data "$list" \
          --modes attention_rescoring ctc_greedy_search --result_dir "$result" --device cpu > /dev/null 2>&1
        python tools/score_decodes.py --ref "$text" --decode_dir "$result" > /dev/null; }
    done
    read -r wall rss < "$dir.time"
    trainable=$(grep -o "trainable parameters: [0-9,]* of [0-9,]*" "$dir.log" | head -1 | sed 's/trainable parameters: //')
    rows+=("| $variant | ${mix/mixed/+ synthetic} | $trainable | $(python - "$dir" "$wall" "$rss" "$steps" <<'PY'
import sys
from pathlib import Path
from tools.seed_summary import read_total
import re
import statistics
d, wall, rss, steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# time per step: the median over the log's step lines (every 20 steps) within an epoch
seen = [(int(h) * 3600 + int(m) * 60 + int(sec), int(e), int(n)) for h, m, sec, e, n in
        re.findall(r"^(\d\d):(\d\d):(\d\d) .* epoch (\d+) step (\d+) batch", open(f"{d}.log").read(), re.M)]
per_step = [(t2 - t1) / (n2 - n1) for (t1, e1, n1), (t2, e2, n2) in zip(seen, seen[1:]) if e1 == e2 and n2 > n1]
def rate(s, mode="attention_rescoring", what="SER"):
    return read_total(Path(f"{d}/decode_{s}_step{steps}/{mode}/cer"), what)
print(f"{rate('test'):.1f} ({rate('test', 'ctc_greedy_search'):.1f}) | {rate('test_connected', what='CER'):.1f} | "
      f"{rate('synthetic', what='CER'):.2f} | {statistics.median(per_step) if per_step else wall / steps:.2f} s | "
      f"{wall / 60:.1f} min | {rss / 1024:.0f} MiB |")
PY
)")
  done
done
checks=()
for variant in $resume_check; do  # (real speakers only: the same run stopped halfway and resumed)
  dir=$out/${variant}_real
  parted=${dir}_resumed
  for stop in $((steps / 2)) "$steps"; do
    [ -f "$parted/step_$stop.pt" ] && continue
    resume=(); [ "$stop" = "$steps" ] && resume=(--checkpoint auto)
    # shellcheck disable=SC2046  # the flags are words
    python -m asrkit.bin.train --config conf/train_conformer_cpu.yaml --train_data "$data/train/data.list" \
      --cv_data data/dev/data.list --model_dir "$parted" --num_threads 2 --enc_init "$base" \
      --enc_init_mods cmvn.,encoder.,decoder.,ctc. --max_steps "$stop" "${resume[@]}" "${override_args[@]}" \
      $(flags_of "$variant") >> "$parted.log" 2>&1 || { tail -5 "$parted.log"; exit 1; }
  done
  checks+=("$(python - "$dir/step_$steps.pt" "$parted/step_$steps.pt" "$variant" "$((steps / 2))" "$parted.log" <<'PY'
import sys
import torch
from asrkit.checkpoint.load import load_checkpoint
a, b = (load_checkpoint(p)["model"] for p in sys.argv[1:3])
same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
mid = "(mid-epoch)" in open(sys.argv[5]).read()
print(f"* {sys.argv[3]}: stopped at step {sys.argv[4]}{' (mid-epoch)' if mid else ''} and resumed: "
      f"{'the same weights as the uninterrupted run (torch.equal on the ' + str(len(a)) + ' tensors the checkpoint stores)' if same else 'DIFFERENT weights'}")
PY
)")
done
{
  echo "| variant | data | trainable of all parameters | $test_speaker isolated SER % (ctc_greedy) | connected CER % | synthetic test CER % | time per step | run (train + CV) | peak RSS |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  printf '%s\n' "${rows[@]}"
  [ ${#checks[@]} = 0 ] || { echo; printf '%s\n' "${checks[@]}"; }
} | tee "$out/table.md"
