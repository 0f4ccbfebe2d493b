#!/usr/bin/env bash
# Connected digits (synthesized with espeak-ng, speaker-independent splits): the default recipe.
#   bash run.sh                               # all stages
#   bash run.sh --stage 4 --stop_stage 5      # train, then average + decode + score
#   bash run.sh --model transducer            # the transducer (RNN-T + CTC + attention) instead
#   bash run.sh --model whisper               # a small Whisper-architecture model (docs/whisper.md)
#   bash run.sh --streaming true              # the U2++ model (with --model transducer: U2++ transducer)
#   bash run.sh --augment true                # + noise, reverberation and volume augmentation (-> <dir>_aug)
#   bash run.sh --seeds "1 2 3"               # one model per seed (<dir>_seed1 ...), then mean ± sd per mode
#   bash run.sh --stage 5 --average_mode ema  # decode the weight EMA (trained with ema_decay) into decode_<set>_ema
#   bash run.sh --stage 7 --stop_stage 8      # word 3-gram of the training transcripts; decode with it
# Multi-node: run the same command on every node with its own --node_rank, e.g.
#   bash run.sh --stage 4 --stop_stage 4 --num_nodes 2 --node_rank 0 --master_addr 10.0.0.1
# Stages are idempotent: a finished stage is skipped; stage 4 resumes (checkpoint=auto).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. ./path.sh || exit 1
recipe_args=("$@")            # (--seeds runs this script again per seed with them)

. tools/recipe_defaults.sh   # the shared variables and their defaults; this recipe's own values follow
# data
corpus_dir=corpus/digits
train_utts=4000; dev_utts=300; test_utts=300
# real speech: the Free Spoken Digit Dataset speakers that train with the synthetic corpus (their
# isolated takes and real_connected connected utterances each; tools/prepare_fsdd.py), from
# corpora/fsdd/recordings.tar.gz (CC BY-SA 4.0) unpacked into corpus/fsdd unless fsdd_dir names
# the dataset's own recordings; empty real_speakers: synthetic only.  real_test_speaker holds one
# of them out -- a leave-one-speaker-out fold (docs/recipes.md): its isolated takes and connected
# utterances become the test sets real_test and real_test_connected.  The dataset's other
# speakers are a blind test: never train on them.
real_speakers="george jackson lucas nicolas"
real_test_speaker=
real_connected=100
real_takes=                   # N: only each speaker's first N takes of each digit (a quick run); empty: all 50
fsdd_dir=
# non_native N: N more synthesized utterances in foreign accents (tools/synthesize_corpus.py
# --non_native) join the real speakers in the second phase below (0: none; 1,500 measured no
# better on the development speaker: docs/experiments/fsdd_real_speech.md)
non_native=0
# With real speakers, stage 4 trains in two phases (docs/recipes.md): the synthetic corpus alone
# into $dir/synthetic (the config as it is), then, from its average, the fine-tuning phase into
# $dir on data/train_finetune -- the synthetic corpus and the real speakers -- with
# finetune_overrides after the config's: the telephone band and recording levels (band limit,
# volume), exact zeros as recordings hold them (no dither), time masks that leave an isolated
# word audible, and a short schedule from a lower peak.  synthetic_model=PATH starts the
# second phase from that model instead of training the first (leave-one-speaker-out folds share
# the default run's: --synthetic_model exp/conformer_cpu/synthetic/avg_3.pt).
finetune_overrides="max_epoch=4 optim_conf.lr=0.001 scheduler=NoamHoldAnnealing scheduler_conf.warmup_steps=50
  scheduler_conf.hold_steps=200 scheduler_conf.max_steps=1030 scheduler_conf.decay_rate=1.0 scheduler_conf.min_lr=1.0e-5
  dataset_conf.band_limit=true dataset_conf.volume_perturb=true
  dataset_conf.volume_perturb_conf.scale_low=0.05 dataset_conf.volume_perturb_conf.scale_high=6.0
  dataset_conf.volume_perturb_conf.scale_distribution=log_uniform
  dataset_conf.fbank_conf.dither=0.0 dataset_conf.spec_aug_conf.max_t_fraction=0.2"
synthetic_model=
# training: the default model's config and dir; --model / --streaming pick theirs below unless
# --train_config / --dir name others
train_config=conf/train_conformer_cpu.yaml
dir=exp/conformer_cpu
num_workers=1
cpu_nproc_per_node=2          # without GPUs: 2 processes x 1 thread (docs/performance.md)
# decoding (those left empty take the model's values below; given, they are used)
average_num=3
decode_modes=                 # ctc_attention: the four CTC/attention modes; transducer: the transducer modes + ctc_greedy_search
decode_ctc_weight=            # ctc_attention: attention_rescoring's CTC weight 0.3; transducer: the rescorings' search-score weight 0.5 (WeNet's rnnt recipe)
decode_reverse_weight=        # 0.3 with --streaming true (bidirectional decoder), else 0.0
decode_length_penalty=        # attention mode, chosen on the dev set (bench/decode_penalties.py; docs/recipes.md): 1.5, whisper 0
# (the transducer modes' weights, decode_search_ctc_weight 0.3 etc., are WeNet's rnnt recipe's: tools/recipe_defaults.sh)
# model: ctc_attention (conformer CTC/attention: conf/train_conformer_cpu.yaml -> exp/conformer_cpu)
#   | transducer (RNN-T + CTC + attention, stateless embedding predictor:
#   conf/train_transducer_cpu.yaml -> exp/transducer_cpu)
#   | whisper (WeNet's model: whisper -- Whisper's log-mel, tokenizer and prompt -- at 2 + 2 layers of
#   128 dimensions from random initialisation: conf/train_whisper_cpu.yaml -> exp/whisper_cpu; stage 1
#   writes the log-mel's CMVN into data/train/global_cmvn_log_mel, stage 2 has no units to make; a
#   converted OpenAI checkpoint trains with its own train.yaml and --checkpoint, docs/whisper.md)
model=ctc_attention
# streaming: true trains and decodes the U2++ model instead (conf/train_u2pp_conformer_cpu.yaml
# -> exp/u2pp_cpu; transducer: conf/train_u2pp_transducer_cpu.yaml -> exp/u2pp_transducer_cpu):
# stage 5 decodes with full context and then in chunks of each of $streaming_chunks encoder
# frames (decode_test_chunkN)
streaming=false
streaming_chunks="16 8 4"
# the recipe's own hard test: unheard voices in rooms and noise training never meets (stage 0; docs/recipes.md)
# (stage 0 builds test_noisy when it is one of test_sets)
test_sets="test test_noisy"
noise_dir=corpus/noise
train_rirs=48; train_noises=48   # the training set of simulated rooms and noise recordings
# augment: true switches on the config's noise, reverberation and volume augmentation (lists from stage 0)
# and trains into <dir>_aug unless --dir is given
augment=false
# seeds: "1 2 3" trains and decodes one model per seed into <dir>_seed<S> (the data stages run once) and
# prints mean ± sd per decode and mode (tools/seed_summary.py; also written to <dir>_seeds.md)
seeds=
# LM fusion (docs/decoding.md), not in the default run (stop_stage 6): stage 7 estimates a word
# n-gram of data/train/text (training transcripts only), stage 8 chooses its weights on dev for
# each of lm_modes (tools/tune_fusion.py) and decodes the test sets with them into
# $dir/decode_<set>_lm/<mode>; empty lm_modes: the model's beam searches below
lm_order=3
lm_prune=""
lm_modes=

. tools/parse_options.sh || exit 1
set -euo pipefail
[ -z "$real_test_speaker" ] || test_sets="$test_sets real_test real_test_connected"
# The hard test's settings, fixed before any tuning (not options): RIRs and noise of
# tools/make_noise_rooms.py --kind test (RT60 0.7-1.1 s, chords and brown noise) at 2-5 dB SNR.
# Training never uses them (its noise_db_range is 6-30 dB, its RT60 0.15-0.6 s, its noise types
# babble, tone, white and pink).
noisy_test_snr="2 5"
noisy_test_seed=3
noisy_test_rooms=16; noisy_test_noises=16
# (finetune_mods: the modules the second phase takes from the first -- all of them)
finetune_mods=cmvn.,encoder.,decoder.,ctc.
case "$model/$streaming" in
  ctc_attention/false) config=conf/train_conformer_cpu.yaml; exp=exp/conformer_cpu ;;
  ctc_attention/true) config=conf/train_u2pp_conformer_cpu.yaml; exp=exp/u2pp_cpu ;;
  transducer/false) config=conf/train_transducer_cpu.yaml; exp=exp/transducer_cpu ;;
  transducer/true) config=conf/train_u2pp_transducer_cpu.yaml; exp=exp/u2pp_transducer_cpu ;;
  whisper/false) config=conf/train_whisper_cpu.yaml; exp=exp/whisper_cpu ;;
  *) echo "$0: --model ctc_attention|transducer|whisper and --streaming true|false (whisper: false), not '$model' and '$streaming'" >&2
     exit 1 ;;
esac
[ "$model" != transducer ] || finetune_mods=$finetune_mods,predictor.,joint.
[ "$model" != whisper ] || finetune_mods=encoder.,decoder.,ctc.   # (no CMVN layer: Whisper's log-mel is its own scale)
aug_overrides=""
case "$augment" in
  true) aug_overrides="dataset_conf.reverb=true dataset_conf.noise=true dataset_conf.volume_perturb=true"; exp=${exp}_aug ;;
  false) ;;
  *) echo "$0: --augment true|false, not '$augment'" >&2; exit 1 ;;
esac
[ "$train_config" != conf/train_conformer_cpu.yaml ] || train_config=$config
[ "$dir" != exp/conformer_cpu ] || dir=$exp
if [ "$model" = transducer ]; then
  decode_modes=${decode_modes:-rnnt_greedy_search rnnt_beam_search modified_beam_search rnnt_beam_attn_rescoring ctc_beam_td_attn_rescoring ctc_greedy_search}
  decode_ctc_weight=${decode_ctc_weight:-0.5}
  lm_modes=${lm_modes:-rnnt_beam_search modified_beam_search}
else
  decode_modes=${decode_modes:-ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring}
  decode_ctc_weight=${decode_ctc_weight:-0.3}
  lm_modes=${lm_modes:-ctc_prefix_beam_search attention_rescoring}
fi
# (whisper: 0 on the dev set, run 5 of docs/experiments/whisper_digits.md; the conformer: 1.5)
if [ "$model" = whisper ]; then decode_length_penalty=${decode_length_penalty:-0.0}; fi
decode_length_penalty=${decode_length_penalty:-1.5}
if [ "$streaming" = true ]; then decode_reverse_weight=${decode_reverse_weight:-0.3}; fi
decode_reverse_weight=${decode_reverse_weight:-0.0}
. tools/recipe_stages.sh

if [ -n "$seeds" ]; then  # the data stages once, then training, decoding (and export) per seed
  again=(bash "./$(basename "${BASH_SOURCE[0]}")" "${recipe_args[@]}" --seeds "")
  if [ "$stage" -le 3 ]; then "${again[@]}" --stop_stage $(( stop_stage < 3 ? stop_stage : 3 )); fi
  runs=()
  for s in $seeds; do
    [[ $s =~ ^[0-9]+$ ]] || { echo "$0: --seeds takes whole numbers, not '$s'" >&2; exit 1; }
    runs+=("${dir}_seed$s")
    if [ "$stop_stage" -ge 4 ]; then
      say "seed $s: train and decode -> ${dir}_seed$s"
      "${again[@]}" --stage $(( stage > 4 ? stage : 4 )) --dir "${dir}_seed$s" --train_overrides "$train_overrides seed=$s"
    fi
  done
  [ "$stop_stage" -lt 5 ] || python tools/seed_summary.py "${runs[@]}" --out "${dir}_seeds.md"
  exit 0
fi

if run_stage 0; then
  say "0: synthesize the corpus into $corpus_dir and prepare data/{train,dev,test}"
  [ -n "$real_speakers" ] || non_native=0
  python tools/synthesize_corpus.py --out "$corpus_dir" --train "$train_utts" --dev "$dev_utts" --test "$test_utts" \
    --non_native "$non_native"
  say "0: noise and simulated rooms for training -> $noise_dir/train, data/noise/train"
  python tools/make_noise_rooms.py --out "$noise_dir/train" --kind train --seed 1 --rirs "$train_rirs" \
    --noises "$train_noises"
  sets="train dev test"
  if [[ " $test_sets " == *" test_noisy "* ]]; then
    say "0: the hard test: $corpus_dir/test in the rooms and noise of $noise_dir/test -> data/test_noisy"
    python tools/make_noise_rooms.py --out "$noise_dir/test" --kind test --seed 2 --rirs "$noisy_test_rooms" \
      --noises "$noisy_test_noises"
    # shellcheck disable=SC2086  # noisy_test_snr is two numbers
    python tools/make_noisy_set.py --src "$corpus_dir/test" --dst "$corpus_dir/test_noisy" \
      --rir_scp "$noise_dir/test/rir.scp" --noise_scp "$noise_dir/test/noise.scp" --snr_range $noisy_test_snr \
      --seed "$noisy_test_seed"
    sets="$sets test_noisy"
  fi
  for s in $sets; do
    mkdir -p "data/$s"
    for f in wav.scp text utt2spk; do cmp -s "$corpus_dir/$s/$f" "data/$s/$f" || cp "$corpus_dir/$s/$f" "data/$s/$f"; done
  done
  if [ -n "$real_speakers" ]; then
    if [ -z "$fsdd_dir" ]; then
      fsdd_dir=corpus/fsdd
      if [ ! -d "$fsdd_dir/recordings" ]; then
        say "0: unpack the shipped real speech ($ASRKIT_ROOT/corpora/fsdd/recordings.tar.gz) into $fsdd_dir"
        mkdir -p "$fsdd_dir" && tar -xzf "$ASRKIT_ROOT/corpora/fsdd/recordings.tar.gz" -C "$fsdd_dir"
      fi
    fi
    real_train=$(echo " $real_speakers " | sed "s/ $real_test_speaker / /; s/^ *//; s/ *$//")
    [ -z "$real_test_speaker" ] || [ "$real_train" != "$(echo $real_speakers)" ] || {
      echo "$0: --real_test_speaker $real_test_speaker is not one of --real_speakers '$real_speakers'" >&2; exit 1; }
    [ -n "$real_train" ] || { echo "$0: --real_speakers '$real_speakers' leaves no real speaker to train" >&2; exit 1; }
    say "0: real speech: train $real_train${real_test_speaker:+, test $real_test_speaker} -> data/fsdd"
    rm -rf data/fsdd
    # shellcheck disable=SC2086  # the speakers are word lists
    python tools/prepare_fsdd.py --corpus_dir "$fsdd_dir" --out data/fsdd ${real_train:+--train_speakers $real_train} \
      ${real_test_speaker:+--test_speakers $real_test_speaker} --connected "$real_connected" \
      ${real_takes:+--max_takes $real_takes} --seed 1
    # the second phase's training set: the synthetic corpus (with non_native > 0 its foreign
    # accents too) and the real speakers' takes (a file is rewritten only when it changes, so a
    # later stage redoes only what another set of speakers changed)
    mkdir -p data/train_finetune
    for f in wav.scp text utt2spk; do
      non_native_set=(); [ "$non_native" = 0 ] || non_native_set=("$corpus_dir/train_non_native/$f")
      sort "$corpus_dir/train/$f" "${non_native_set[@]}" data/fsdd/train/$f \
        > "data/train_finetune/$f.new"
      if cmp -s "data/train_finetune/$f.new" "data/train_finetune/$f"; then rm "data/train_finetune/$f.new"
      else mv "data/train_finetune/$f.new" "data/train_finetune/$f"; fi
    done
    if [ -n "$real_test_speaker" ]; then
      for s in test test_connected; do
        mkdir -p "data/real_$s"
        for f in wav.scp text utt2spk; do
          cmp -s "data/fsdd/$s/$f" "data/real_$s/$f" || cp "data/fsdd/$s/$f" "data/real_$s/$f"
        done
      done
    fi
  fi
  mkdir -p data/noise/train
  for f in rir.scp noise.scp; do cmp -s "$noise_dir/train/$f" "data/noise/train/$f" || cp "$noise_dir/train/$f" "data/noise/train/$f"; done
fi

if [ "$model" = whisper ]; then  # (statistics of Whisper's log-mel, beside the fbank ones; no units)
  run_stage 1 && stage_cmvn 1 config="$train_config" name=global_cmvn_log_mel
  run_stage 2 && say "2: Whisper's tokenizer comes with its tiktoken file (no units): skipped"
else
  run_stage 1 && stage_cmvn 1 config="$train_config"
  run_stage 2 && stage_units 2 what="character units" units=data/dict/units.txt
fi

# shellcheck disable=SC2086  # test_sets is a word list
run_stage 3 && stage_data_lists 3 type="$data_type" per_shard="$num_utts_per_shard" -- train dev $test_sets \
  ${real_speakers:+train_finetune}
if run_stage 4; then
  # the synthetic corpus: the whole training without real speakers, else their first phase
  first=$dir; [ -z "$real_speakers" ] || first=$dir/synthetic
  if [ -z "$real_speakers" ] || [ -z "$synthetic_model" ]; then
    [ "$first" = "$dir" ] || say "4: first phase: the synthetic corpus -> $first"
    stage_train 4 "${launch[@]}" config="$train_config" dir="$first" type="$data_type" \
      checkpoint="$checkpoint" workers="$num_workers" threads="$num_threads" overrides="$aug_overrides $train_overrides"
  fi
  if [ -n "$real_speakers" ]; then
    if [ -z "$synthetic_model" ]; then
      synthetic_model=$first/avg_${average_num}.pt
      stage_average 4 dir="$first" checkpoint="$synthetic_model" average_num="$average_num" average_mode="$average_mode"
    fi
    say "4: second phase: from $synthetic_model, the synthetic corpus and the real speakers -> $dir"
    # (stage_train splits overrides at any white space: finetune_overrides' line breaks too)
    stage_train 4 "${launch[@]}" config="$train_config" dir="$dir" train=train_finetune type="$data_type" \
      checkpoint="$checkpoint" workers="$num_workers" threads="$num_threads" \
      overrides="$aug_overrides $finetune_overrides $train_overrides" -- --enc_init "$synthetic_model" \
      --enc_init_mods "$finetune_mods"
  fi
fi

# average_mode ema: the weight EMA of the last epoch (a run trained with ema_decay) into avg_ema.pt,
# its scores in decode_<set>_ema beside the average's
decode_name=
if [ "$average_mode" = ema ]; then decode_name=_ema; decode_checkpoint=${decode_checkpoint:-$dir/avg_ema.pt}; fi
decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

# shellcheck disable=SC2086  # test_sets and streaming_chunks are word lists
if run_stage 5; then
  stage_average_decode_score 5 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" type="$data_type" \
    name="$decode_name" -- $test_sets
  if [ "$streaming" = true ]; then
    for chunk in $streaming_chunks; do
      stage_average_decode_score 5 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" \
        type="$data_type" chunk="$chunk" name="$decode_name" -- $test_sets
    done
  fi
fi
# (a transducer exports too: final.zip with its searches, ONNX in sherpa-onnx's transducer layout)
if [ "$model" = whisper ]; then  # (the exports take Kaldi fbank: asrkit.export.runtime_features)
  run_stage 6 && say "6: a model of Whisper's log-mel is not exported (docs/whisper.md): decode it with recognize/transcribe/serve"
else
run_stage 6 && stage_export 6 config="$dir/train.yaml" checkpoint="$decode_checkpoint" out="$dir/final.zip" onnx_dir="$dir/onnx" \
  check_data="data/dev/$(list_name "$data_type")"
fi

lm=data/lm/${lm_order}gram.arpa
run_stage 7 && stage_lm 7 out="$lm" order="$lm_order" prune="$lm_prune"
if run_stage 8; then
  for mode in $lm_modes; do
    stage_tune_fusion 8 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" type="$data_type" lm="$lm" \
      mode="$mode" -- dev
    # shellcheck disable=SC2086  # test_sets is a word list
    stage_average_decode_score 8 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" type="$data_type" \
      modes="$mode" name=_lm extra="$(cat "$dir/fusion_$mode.args")" -- $test_sets
  done
fi
# the run ends with the command that serves the model it trained (once stage 5 has averaged it)
if [ "$stop_stage" -ge 5 ]; then serve_hint "$stop_stage" dir="$dir" checkpoint="$decode_checkpoint"; fi
exit 0
