#!/usr/bin/env bash
# English sentences (864-word grammar, synthesized with espeak-ng, speaker-independent
# splits) with BPE units and WER scoring: a larger-vocabulary task than digits.
#   bash run.sh                               # all stages
#   bash run.sh --stage 4 --stop_stage 5      # train, then average + decode + score
#   bash run.sh --stage 7 --stop_stage 8      # word LM of the training transcripts, then decode with it
# Multi-node: run the same command on every node with its own --node_rank (docs/multinode.md).
# Stages are idempotent: a finished stage is skipped; stage 4 resumes (checkpoint=auto).
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. ./path.sh || exit 1

. tools/recipe_defaults.sh   # the shared variables and their defaults; this recipe's own values follow
# data
corpus_dir=corpus/sentences
train_utts=12000; dev_utts=400; test_utts=500
nbpe=60                       # sentencepiece pieces (the units file adds <blank> <unk> <sos/eos>): the 26
                              # letters, the word-start mark and 33 merges; 500 pieces stayed on CTC's
                              # plateau here (docs/experiments/sentences_plateau.md)
bpe_type=bpe                  # bpe | unigram (unigram 300 spelled 54 % of tokens letter by letter here)
# voice curriculum (docs/recipes.md): train first on ONE clean training voice, then on the full corpus
# starting from that model (the trainer's --warm_start_*); 0 utterances = the full corpus from scratch
single_voice_utts=3000
single_voice_steps=600
single_voice_overrides="scheduler_conf.warmup_steps=250"
# training
train_config=conf/train_conformer_bpe.yaml
dir=exp/conformer_bpe
num_workers=1
num_threads=1                 # intra-op threads per training process
# launch (torchrun)
cpu_nproc_per_node=2          # without GPUs: 2 processes x num_threads 1 trained ~1.4x faster than 1 x 2 threads here (docs/performance.md)
# decoding
average_num=3
# LM fusion (docs/decoding.md): stage 7 estimates a word n-gram of data/train/text (training
# transcripts only), stage 8 chooses its weights on dev for each of lm_modes (tools/tune_fusion.py)
# and decodes the test sets with them into $dir/decode_<set>_lm/<mode>
stop_stage=8
lm_order=3
lm_prune=""                   # KenLM's --prune thresholds, e.g. "0 0 1"
lm_modes="ctc_prefix_beam_search attention_rescoring"

. tools/parse_options.sh || exit 1
set -euo pipefail
. tools/recipe_stages.sh

# the data sets stages 0 and 3 prepare: the curriculum's one-voice set when it is on
data_sets="train dev test"; [ "$single_voice_utts" -gt 0 ] && data_sets="$data_sets train_single"

if run_stage 0; then
  say "0: synthesize the corpus into $corpus_dir and prepare data/{train,dev,test}"
  # espeak-ng, sox and the venv's packages: installed by the shared setup when missing
  command -v espeak-ng >/dev/null && python -c "import soundfile" 2>/dev/null || . tools/setup_env.sh || exit 1
  python tools/synthesize_corpus.py --task sentences --out "$corpus_dir" \
    --train "$train_utts" --dev "$dev_utts" --test "$test_utts" --single_voice "$single_voice_utts"
  for s in $data_sets; do
    mkdir -p "data/$s"
    for f in wav.scp text utt2spk; do cmp -s "$corpus_dir/$s/$f" "data/$s/$f" || cp "$corpus_dir/$s/$f" "data/$s/$f"; done
  done
fi

run_stage 1 && stage_cmvn 1 config="$train_config"

# both file names carry the pieces and type: another --nbpe never overwrites the units an
# earlier experiment's train.yaml points to
bpe_model=data/dict/bpe${nbpe}_${bpe_type}.model
units=data/dict/bpe${nbpe}_${bpe_type}_units.txt
# asrkit's tokenization rules (the configs say tokenizer_conf.rules: asrkit): the lower-case
# transcripts keep their case; WeNet's BPE rules would upper-case them
run_stage 2 && stage_units 2 what="$bpe_type units ($nbpe pieces), $bpe_model" units="$units" -- \
  --rules asrkit --bpe "$nbpe" --bpe-type "$bpe_type" --bpe-model "$bpe_model"

# shellcheck disable=SC2086  # data_sets is a word list
run_stage 3 && stage_data_lists 3 type="$data_type" per_shard="$num_utts_per_shard" -- $data_sets
# the config names the units and the BPE model; keep them pointing at this run's files
train_overrides="tokenizer_conf.bpe_path=$bpe_model tokenizer_conf.symbol_table_path=$units $train_overrides"
# the voice curriculum: the trainer's warm start on data/train_single (asrkit.bin.train --help)
warm=()
if [ "$single_voice_utts" -gt 0 ]; then
  warm=(--warm_start_data "data/train_single/$(list_name "$data_type")" --warm_start_steps "$single_voice_steps")
  for o in $single_voice_overrides; do warm+=(--warm_start_override "$o"); done
fi
run_stage 4 && stage_train 4 "${launch[@]}" config="$train_config" dir="$dir" type="$data_type" \
  checkpoint="$checkpoint" workers="$num_workers" threads="$num_threads" overrides="$train_overrides" -- "${warm[@]}"

decode_checkpoint=${decode_checkpoint:-$dir/avg_${average_num}.pt}

# shellcheck disable=SC2086  # test_sets is a word list
run_stage 5 && stage_average_decode_score 5 "${decoding[@]}" dir="$dir" checkpoint="$decode_checkpoint" \
  type="$data_type" -- $test_sets
run_stage 6 && stage_export 6 config="$dir/train.yaml" checkpoint="$decode_checkpoint" out="$dir/final.zip" onnx_dir="$dir/onnx" \
  check_data="data/dev/$(list_name "$data_type")"

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
