# Stages every asrkit recipe shares (sourced by examples/*/s0/run.sh after parse_options.sh).
# Each stage function takes its stage number first (for its messages), then what it uses as
# NAME=VALUE arguments (an unknown or missing name is an error), then, after "--", lists or
# options it hands on.  It reads no recipe variable itself.  Finished work (a CMVN file, a
# list, an average, an export) is skipped, so rerunning a stage is safe.
#
#   stage_cmvn N config=YAML [set=train] [name=F]       data/SET/F (global_cmvn) from data/SET/wav.scp
#   stage_units N what=TEXT units=FILE [-- OPT...]      units from data/train/text (make_units.py OPTs);
#                                                       rebuilt when the OPTs or the text change
#   stage_data_lists N type=raw|shard [per_shard=N] -- SET...
#                                                       data/SET/data.list (+ data.shards.list)
#   stage_train N "${launch[@]}" config=YAML dir=DIR [train=SET] [cv=SET] type=raw|shard
#               [checkpoint=auto|PATH] [workers=N] [threads=N] [overrides="K=V ..."] [-- ARG...]
#                                                       torchrun -m asrkit.bin.train (1..N nodes);
#                                                       ARGs go to train.py (--max_steps N, ...)
#   stage_average N dir=DIR checkpoint=PT average_num=K [average_mode=best|last|ema]
#                                                       average DIR's epochs into PT when it is avg_*.pt
#                                                       and missing or older than an epoch checkpoint
#   stage_average_decode_score N "${decoding[@]}" dir=DIR checkpoint=PT type=raw|shard -- SET...
#                                                       average into PT when it is avg_*.pt, decode
#                                                       (the transducer modes' weights too:
#                                                       search_ctc_weight=W ... attn_weight=W), score
#                                                       into DIR/decode_SET (full context) or
#                                                       DIR/decode_SET_chunkC[_leftL] (chunk=C > 0,
#                                                       left_chunks=L >= 0)
#                                                       [extra="recognize options"] [name=_SUFFIX]: more options
#                                                       (an LM, phrases) into DIR/decode_SET..._SUFFIX
#   stage_lm N out=ARPA [order=3] [prune="0 0 1"] [text=data/train/text]
#                                                       an n-gram LM of the training transcripts
#                                                       (tools/train_lm.py); rebuilt when the options or
#                                                       the text change
#   stage_tune_fusion N "${decoding[@]}" dir=DIR checkpoint=PT type=raw|shard lm=ARPA mode=MODE
#               [weights="0.1 ..."] [bonuses="0 ..."] -- SET
#                                                       DIR/fusion_MODE.args: the LM weights
#                                                       tools/tune_fusion.py chooses on SET (rows in .json)
#   stage_export N config=YAML checkpoint=PT out=ZIP [onnx_dir=DIR] [check_data=LIST]
#                                                       TorchScript archive; with onnx_dir also the
#                                                       sherpa-onnx models (asrkit.bin.export_onnx;
#                                                       a transducer's one-symbol check on check_data)
#   serve_hint N dir=DIR checkpoint=PT                  the command that serves the model (asrkit serve,
#                                                       docs/serve.md); a recipe's last stage ends with it
#
# Two arrays carry the shared launch and decoding variables of tools/recipe_defaults.sh (after
# the command-line options) to those stages: `launch` and `decoding`, built below.

say() { echo "[$(date +%H:%M:%S)] stage $*" >&2; }
run_stage() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }

# The shared variables as stage arguments (recipe_defaults.sh lists what each one means).
launch=(nodes="$num_nodes" node_rank="$node_rank" master_addr="$master_addr" master_port="$master_port"
        host_node_addr="${HOST_NODE_ADDR:-}" nproc="${nproc_per_node:-}" cpu_nproc="$cpu_nproc_per_node"
        max_restarts="$max_restarts" rdzv_timeout="$rdzv_timeout")
decoding=(average_num="$average_num" average_mode="$average_mode" modes="$decode_modes" beam="$beam_size"
          batch="$decode_batch_size" ctc_weight="$decode_ctc_weight" reverse_weight="$decode_reverse_weight"
          device="$decode_device"
          length_penalty="$decode_length_penalty" blank_penalty="$decode_blank_penalty"
          chunk="$decode_chunk_size" left_chunks="$decode_left_chunks" streaming="$decode_simulate_streaming"
          search_ctc_weight="$decode_search_ctc_weight" search_transducer_weight="$decode_search_transducer_weight"
          transducer_weight="$decode_transducer_weight" attn_weight="$decode_attn_weight")

# bind "NAME..." ARG...: in the calling stage function, set its local variable NAME from each
# NAME=VALUE ARG; the ARGs after "--" go to the caller's array `rest`.  A NAME the stage does
# not take, or an ARG that is not NAME=VALUE, is an error naming the stage.
bind() {
  local _allowed _arg _name
  # shellcheck disable=SC2086  # the names, one space apart
  _allowed=" $(echo $1) "; shift
  rest=()
  while [ $# -gt 0 ]; do
    _arg=$1; shift
    if [ "$_arg" = -- ]; then rest=("$@"); return 0; fi
    _name=${_arg%%=*}
    if [ "$_name" = "$_arg" ] || [[ $_allowed != *" $_name "* ]]; then
      echo "recipe_stages: ${FUNCNAME[1]} takes NAME=VALUE arguments from:$_allowed-- not '$_arg'" >&2
      return 2
    fi
    printf -v "$_name" '%s' "${_arg#*=}"
  done
}

# need NAME...: each of the calling stage's NAMEs must be set (not empty).
need() {
  local _n
  for _n in "$@"; do
    [ -n "${!_n}" ] || { echo "recipe_stages: ${FUNCNAME[1]} needs $_n=VALUE" >&2; return 2; }
  done
}

# stale TARGET FILE...: TARGET is missing/empty, or one of the FILEs that exist is newer than it.
stale() {
  local target=$1 f; shift
  [ -s "$target" ] || return 0
  for f in "$@"; do [ -e "$f" ] && [ "$f" -nt "$target" ] && return 0; done
  return 1
}

list_name() { if [ "$1" = shard ]; then echo data.shards.list; else echo data.list; fi; }

stage_cmvn() {
  local n=$1 config="" set=train name=global_cmvn rest; shift
  bind "config set name" "$@" && need config || return 2
  # (a wav.scp newer than the statistics -- stage 0 wrote another training set, e.g. another
  # held-out speaker -- is counted again; name=: another file for a config of other features)
  local keep=(--keep_existing)
  stale "data/$set/$name" "data/$set/wav.scp" && keep=()
  say "$n: global CMVN statistics (an existing data/$set/$name of the same features and data is kept)"
  python tools/compute_cmvn_stats.py --train_config "$config" --in_scp "data/$set/wav.scp" \
    --out_cmvn "data/$set/$name" --num_workers "$(nproc)" "${keep[@]}"
}

# The one rule for "rebuild": UNITS.stamp records the make_units.py options and a digest of
# the training transcripts; other options (--bpe 30 instead of 50) or other transcripts
# rebuild the units, the same ones skip (unless a --bpe-model it names is missing).
stage_units() {
  local n=$1 what="" units="" rest; shift
  bind "what units" "$@" && need what units || return 2
  local want model="" a prev=""; want="${rest[*]} $(sha256sum data/train/text | cut -c1-16)"
  for a in "${rest[@]}"; do [ "$prev" = --bpe-model ] && model=$a; prev=$a; done
  if [ -s "$units" ] && [ "$(cat "$units.stamp" 2>/dev/null)" = "$want" ] && { [ -z "$model" ] || [ -s "$model" ]; }; then
    say "$n: $units is up to date: $what, skipped"; return
  fi
  say "$n: $what -> $units"
  mkdir -p "$(dirname "$units")"
  python tools/make_units.py "${rest[@]}" data/train/text "$units"
  echo "$want" > "$units.stamp"
}

stage_data_lists() {
  local n=$1 type="" per_shard=1000 rest s; shift
  bind "type per_shard" "$@" && need type || return 2
  say "$n: data lists ($type): ${rest[*]}"
  for s in "${rest[@]}"; do
    # (rewritten when stage 0 wrote the set again: its wav.scp or text newer than the list)
    if stale "data/$s/data.list" "data/$s/wav.scp" "data/$s/text"; then
      python tools/make_raw_list.py "data/$s/wav.scp" "data/$s/text" "data/$s/data.list"
    fi
    if [ "$type" = shard ] && stale "data/$s/data.shards.list" "data/$s/data.list"; then
      python tools/make_shard_list.py --num_utts_per_shard "$per_shard" --num_threads "$(nproc)" \
        "data/$s/data.list" "data/$s/shards" "data/$s/data.shards.list"
    fi
  done
}

# PORT when nothing on this host listens on it, else the next port that is free, said on
# stderr: a second single-node training on the same machine (another recipe, another
# experiment) must not die in torchrun's EADDRINUSE traceback.  Bash's /dev/tcp: no python start.
free_local_port() {
  local port=$1 tries=0
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -ge 100 ]; then
      echo "stage_train: ports $1..$port on 127.0.0.1 are all in use: give --master_port" >&2; return 2
    fi
    port=$((port + 1))
  done
  [ "$port" = "$1" ] || echo "[$(date +%H:%M:%S)] master_port $1 is in use on this host (another training?): using $port" >&2
  echo "$port"
}

# torchrun on this node: nproc defaults to one process per visible GPU (nvidia-smi sees one and
# CUDA_VISIBLE_DEVICES is not empty), else to cpu_nproc capped at the CPU count; host_node_addr=host:port selects c10d rendezvous instead of master_addr/master_port.
# rdzv_timeout=S: a node that is not the master first waits up to S seconds for the master's
# port (tools/wait_for_master.py: a one-line error naming it, exit 2); torchrun then gets it as
# the rendezvous timeout (static: --rdzv_conf timeout=S; c10d: join_timeout=S).
stage_train() {
  local n=$1 config="" dir="" train=train cv=dev type="" checkpoint="" workers="" threads="" overrides=""
  local nodes=1 node_rank=0 master_addr=127.0.0.1 master_port=29500 host_node_addr="" nproc="" cpu_nproc=1
  local max_restarts=0 rdzv_timeout=900 rest; shift
  bind "config dir train cv type checkpoint workers threads overrides nodes node_rank master_addr master_port
        host_node_addr nproc cpu_nproc max_restarts rdzv_timeout" "$@" && need config dir type || return 2
  [[ $rdzv_timeout =~ ^[1-9][0-9]*$ ]] || { echo "stage_train: rdzv_timeout must be a positive number of seconds, not '$rdzv_timeout'" >&2; return 2; }
  if [ -z "$nproc" ]; then
    if [ -n "${CUDA_VISIBLE_DEVICES-all}" ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      nproc=gpu  # torchrun's own count of the visible GPUs (no torch import here: it costs seconds)
    else
      nproc=$(( cpu_nproc < $(command nproc) ? cpu_nproc : $(command nproc) ))
    fi
  fi
  local rendezvous
  if [ -n "$host_node_addr" ]; then
    rendezvous=(--rdzv_backend c10d --rdzv_endpoint "$host_node_addr" --rdzv_id "asrkit_$(basename "$dir")"
                --rdzv_conf "join_timeout=$rdzv_timeout")
    if [ "$nodes" -gt 1 ]; then
      python tools/wait_for_master.py --node_rank "$node_rank" --timeout "$rdzv_timeout" \
        "${host_node_addr%:*}" "${host_node_addr##*:}" || return 2
    fi
  else
    if [ "$nodes" = 1 ]; then master_port=$(free_local_port "$master_port") || return 2; fi
    rendezvous=(--node_rank "$node_rank" --master_addr "$master_addr" --master_port "$master_port"
                --rdzv_conf "timeout=$rdzv_timeout")
    if [ "$nodes" -gt 1 ] && [ "$node_rank" != 0 ]; then
      python tools/wait_for_master.py --node_rank "$node_rank" --timeout "$rdzv_timeout" \
        "$master_addr" "$master_port" || return 2
    fi
  fi
  local opts=() o lst; lst=$(list_name "$type")
  [ -n "$workers" ] && opts+=(--override "dataset_conf.num_workers=$workers")
  for o in $overrides; do opts+=(--override "$o"); done
  [ -n "$checkpoint" ] && opts+=(--checkpoint "$checkpoint")
  [ -n "$threads" ] && opts+=(--num_threads "$threads")
  say "$n: train $config on data/$train -> $dir ($nodes node(s) x $nproc process(es), node_rank $node_rank)"
  python -m torch.distributed.run --nnodes "$nodes" --nproc_per_node "$nproc" "${rendezvous[@]}" \
    --max_restarts "$max_restarts" \
    -m asrkit.bin.train --config "$config" --train_data "data/$train/$lst" --cv_data "data/$cv/$lst" \
    --model_dir "$dir" "${opts[@]}" "${rest[@]}"
}

# An average (avg_*.pt: an averaged model by the naming rule, `python -m asrkit.bin.checkpoints
# kind`) is redone when any epoch checkpoint of dir is newer: training longer and rerunning the
# stage must decode the new model, not the old average.  Another checkpoint (an epoch_N.pt
# chosen by hand) is decoded as it is.
stage_average() {
  local n=$1 dir="" checkpoint="" average_num="" average_mode=best rest; shift
  bind "dir checkpoint average_num average_mode" "$@" && need dir checkpoint average_num || return 2
  # (the checkpoint-naming rule is asrkit.checkpoint.names'; the shell asks it, never globs)
  local kind listing epochs=()
  kind=$(python -m asrkit.bin.checkpoints kind "$checkpoint") || return 1
  if [ "$kind" = average ] && [ -d "$dir" ]; then
    listing=$(python -m asrkit.bin.checkpoints list "$dir" --kind epoch) || return 1
    [ -z "$listing" ] || mapfile -t epochs <<< "$listing"
  fi
  if [ ! -s "$checkpoint" ] || { [ "$kind" = average ] && stale "$checkpoint" "${epochs[@]}"; }; then
    say "$n: average $average_num checkpoints ($average_mode) -> $checkpoint"
    python -m asrkit.bin.average_model --model_dir "$dir" --num "$average_num" --mode "$average_mode" \
      --dst "$checkpoint"
  fi
}

stage_average_decode_score() {
  local n=$1 dir="" checkpoint="" type="" average_num="" average_mode=best modes="" beam=10 batch=16
  local ctc_weight=0.3 reverse_weight=0.0 device=cpu length_penalty=0.0 blank_penalty=0.0 chunk=-1 left_chunks=-1
  local streaming=false extra="" name=""
  local search_ctc_weight=0.3 search_transducer_weight=0.7 transducer_weight=0.5 attn_weight=0.5
  local rest s; shift
  bind "dir checkpoint type average_num average_mode modes beam batch ctc_weight reverse_weight device
        length_penalty blank_penalty chunk left_chunks streaming extra name search_ctc_weight
        search_transducer_weight transducer_weight attn_weight" "$@" \
    && need dir checkpoint type average_num modes || return 2
  local suffix="" chunk_opts=(--decoding_chunk_size "$chunk" --num_decoding_left_chunks "$left_chunks")
  if [ "$chunk" -gt 0 ]; then suffix="_chunk$chunk"; fi
  if [ "$chunk" -gt 0 ] && [ "$left_chunks" -ge 0 ]; then suffix="${suffix}_left$left_chunks"; fi
  suffix="$suffix$name"
  local extra_opts=(); read -r -a extra_opts <<< "$extra"
  case "$streaming" in
    true) chunk_opts+=(--simulate_streaming) ;;
    false) ;;
    *) echo "recipe_stages: stage_average_decode_score takes streaming=true|false, not '$streaming'" >&2
       return 2 ;;
  esac
  stage_average "$n" dir="$dir" checkpoint="$checkpoint" average_num="$average_num" average_mode="$average_mode" \
    || return
  local lst; lst=$(list_name "$type")
  for s in "${rest[@]}"; do
    local result_dir="$dir/decode_$s$suffix"
    say "$n: decode $s ($modes) -> $result_dir"
    # shellcheck disable=SC2086  # modes is a word list
    python -m asrkit.bin.recognize --config "$dir/train.yaml" --checkpoint "$checkpoint" \
      --data "data/$s/$lst" --modes $modes --beam_size "$beam" --batch_size "$batch" \
      --ctc_weight "$ctc_weight" --reverse_weight "$reverse_weight" --length_penalty "$length_penalty" \
      --blank_penalty "$blank_penalty" --search_ctc_weight "$search_ctc_weight" \
      --search_transducer_weight "$search_transducer_weight" --transducer_weight "$transducer_weight" \
      --attn_weight "$attn_weight" "${chunk_opts[@]}" "${extra_opts[@]}" --device "$device" \
      --result_dir "$result_dir"
    python tools/score_decodes.py --ref "data/$s/text" --decode_dir "$result_dir"
  done
}

# The rule for "rebuild" is stage_units': OUT.stamp records the options and a digest of the text.
stage_lm() {
  local n=$1 out="" order=3 prune="" text=data/train/text rest; shift
  bind "out order prune text" "$@" && need out || return 2
  local want; want="order $order prune $prune $(sha256sum "$text" | cut -c1-16)"
  if [ -s "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$want" ]; then
    say "$n: $out is up to date: $order-gram LM of $text, skipped"; return
  fi
  say "$n: $order-gram LM of $text -> $out"
  local opts=(--order "$order" --discount_fallback)  # (the fallback only where discounts cannot be computed)
  # shellcheck disable=SC2206  # prune is a word list
  [ -n "$prune" ] && opts+=(--prune $prune)
  mkdir -p "$(dirname "$out")"
  python tools/train_lm.py "${opts[@]}" "$text" "$out"
  echo "$want" > "$out.stamp"
}

# The LM weights of one mode, chosen on a dev set by measurement; redone when the LM or the
# checkpoint is newer than its choice.  Takes the shared decoding arguments (beam, ctc_weight ...).
stage_tune_fusion() {
  local n=$1 dir="" checkpoint="" type="" lm="" mode="" weights="0.1 0.2 0.3 0.5 0.8" bonuses="0 1 2 3"
  local beam=10 batch=16 ctc_weight=0.3 reverse_weight=0.0 device=cpu
  local average_num="" average_mode="" modes="" length_penalty="" blank_penalty="" chunk="" left_chunks="" streaming=""
  local search_ctc_weight="" search_transducer_weight="" transducer_weight="" attn_weight=""  # (the transducer's: unused)
  local rest; shift
  bind "dir checkpoint type lm mode weights bonuses beam batch ctc_weight reverse_weight device average_num
        average_mode modes length_penalty blank_penalty chunk left_chunks streaming search_ctc_weight
        search_transducer_weight transducer_weight attn_weight" "$@" \
    && need dir checkpoint type lm mode || return 2
  [ "${#rest[@]}" -eq 1 ] || { echo "recipe_stages: stage_tune_fusion takes one dev set after --" >&2; return 2; }
  local out="$dir/fusion_$mode"
  if ! stale "$out.args" "$lm" "$checkpoint"; then say "$n: $out.args exists, skipped"; return; fi
  say "$n: LM weights of $mode on ${rest[0]} -> $out.args"
  # shellcheck disable=SC2086  # weights and bonuses are word lists
  python tools/tune_fusion.py --config "$dir/train.yaml" --checkpoint "$checkpoint" \
    --data "data/${rest[0]}/$(list_name "$type")" --mode "$mode" --lm_path "$lm" --lm_weight $weights \
    --word_bonus $bonuses --beam_size "$beam" --batch_size "$batch" --ctc_weight "$ctc_weight" \
    --reverse_weight "$reverse_weight" --device "$device" --json "$out.json" --best_args "$out.args"
}

# Each export is redone when the checkpoint is newer than it.
stage_export() {
  local n=$1 config="" checkpoint="" out="" onnx_dir="" check_data="" rest; shift
  bind "config checkpoint out onnx_dir check_data" "$@" && need config checkpoint out || return 2
  if ! stale "$out" "$checkpoint"; then
    say "$n: $out exists and is newer than $checkpoint, skipped"
  else
    say "$n: export TorchScript -> $out"
    python -m asrkit.bin.export --config "$config" --checkpoint "$checkpoint" --output "$out" || return 1
  fi
  [ -n "$onnx_dir" ] || return 0
  # (tokens.txt: written by the CTC and the transducer exports alike)
  if ! stale "$onnx_dir/tokens.txt" "$checkpoint"; then
    say "$n: $onnx_dir/tokens.txt exists and is newer than $checkpoint, skipped"; return
  fi
  say "$n: export ONNX for sherpa-onnx -> $onnx_dir"
  python -m asrkit.bin.export_onnx --config "$config" --checkpoint "$checkpoint" --output_dir "$onnx_dir" \
    ${check_data:+--check_data "$check_data"}
}

serve_hint() {
  local n=$1 dir="" checkpoint="" rest; shift
  bind "dir checkpoint" "$@" && need dir checkpoint || return 2
  say "$n: serve this model (microphone page at http://127.0.0.1:10086/, WeNet's websocket protocol on the same port):"
  echo "  asrkit serve --model $dir --checkpoint $checkpoint" >&2
}
