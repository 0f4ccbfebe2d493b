# Variables every asrkit recipe shares, with their defaults (sourced by examples/*/s0/run.sh
# before the recipe sets its own values and before tools/parse_options.sh, so each one is
# also a command-line option: --stage 4, --num_nodes 2, --decode_modes "attention", ...).
# A recipe changes a default by assigning the variable again after sourcing this file.
stage=0
stop_stage=6
# data lists
data_type=raw                 # raw | shard
num_utts_per_shard=1000
# training
train_config=conf/train_conformer.yaml
dir=exp/conformer
checkpoint=auto               # auto: resume from the newest valid checkpoint in $dir, if any
num_workers=4
num_threads=                  # intra-op threads per training process (default: the cores it may use / processes per node)
train_overrides=""            # e.g. "max_epoch=2 accum_grad=2" (each a KEY.PATH=VALUE)
# launch (torchrun)
num_nodes=1
max_restarts=0                # torchrun restarts the whole node's workers this often after a failure
node_rank=0
nproc_per_node=               # default: the GPU count, else cpu_nproc_per_node
cpu_nproc_per_node=1          # training processes per node without GPUs (capped at the CPU count)
master_addr=127.0.0.1
master_port=29500
HOST_NODE_ADDR=${HOST_NODE_ADDR:-}   # host:port for c10d rendezvous (instead of master_addr/port)
rdzv_timeout=900              # seconds a node waits for the others: for the master's port first, then torchrun's rendezvous
# averaging, decoding, scoring
average_num=10
average_mode=best             # best (lowest CV loss) | last | ema (the weight EMA of a run trained with ema_decay)
decode_checkpoint=            # default: $dir/avg_${average_num}.pt
decode_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
beam_size=10
decode_batch_size=16
decode_ctc_weight=0.3         # CTC weight in attention_rescoring
decode_reverse_weight=0.0     # right-to-left decoder weight in attention_rescoring (decoder: bitransformer)
decode_length_penalty=0.0     # attention: rank by score / tokens^length_penalty (WeNet's; 0: none)
decode_blank_penalty=0.0      # CTC modes, attention_rescoring's n-best: blank logit lowered by this (0: none)
# transducer modes (model: transducer; WeNet's rnnt recipe's values, asrkit.bin.recognize's defaults)
decode_search_ctc_weight=0.3          # rnnt_beam_search (+ rnnt_beam_attn_rescoring's n-best): weight of the CTC probabilities
decode_search_transducer_weight=0.7   # ... and of the joint's probabilities
decode_transducer_weight=0.5          # rnnt_beam_attn_rescoring, ctc_beam_td_attn_rescoring: weight of log P_rnnt
decode_attn_weight=0.5                # ... and of the attention score (decode_ctc_weight weighs the search score there)
decode_chunk_size=-1          # -1: full context; N > 0: chunks of N encoder frames (streaming models)
decode_left_chunks=-1         # with decode_chunk_size > 0: left chunks each frame sees (-1: all)
decode_simulate_streaming=false   # true: encoder run chunk by chunk with caches (needs decode_chunk_size > 0)
decode_device=cpu             # cuda to decode on a GPU
test_sets="test"
