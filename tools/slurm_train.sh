#!/usr/bin/env bash
# Multi-node training of an asrkit recipe under SLURM: one task per node, each running the
# recipe's stage 4 (torchrun with this node's GPUs, or 1 process on CPU) with
# node_rank = SLURM_NODEID and node 0 of the allocation as the master.  Submit it from the
# recipe directory; its arguments go to run.sh unchanged and so are the same on every node:
#
#   cd examples/digits/s0
#   sbatch --nodes 2 --gpus-per-node 8 --cpus-per-task 32 tools/slurm_train.sh --train_config conf/x.yaml --dir exp/x
#
# Environment (sbatch passes it on):
#   prepare=once      stages 0-3 first, in the batch step (a shared filesystem; the default);
#           per_node  on every node (node-local disks);  no  skip them
#   max_restarts=1    torchrun restarts a node's workers this often after a failure
#   master_port=...   default 20000 + job id % 20000 (jobs sharing a node do not collide)
# Resubmitting the same command, or a requeue, resumes from the newest checkpoint
# (run.sh's checkpoint=auto; put the experiment directory on a shared filesystem).
#SBATCH --job-name=asrkit-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"

prepare=${prepare:-once}
export max_restarts=${max_restarts:-1}
mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
export master_addr=${hosts[0]}
export master_port=${master_port:-$((20000 + SLURM_JOB_ID % 20000))}
# srun does not inherit sbatch's --cpus-per-task (SLURM >= 22.05) unless told so:
[ -z "${SLURM_CPUS_PER_TASK:-}" ] || export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
echo "slurm_train.sh: job ${SLURM_JOB_ID}, ${SLURM_NNODES} node(s) (${hosts[*]}), master ${master_addr}:${master_port}" >&2

case $prepare in
  once) bash run.sh --stage 0 --stop_stage 3 "$@" ;;
  per_node) srun --ntasks-per-node=1 bash run.sh --stage 0 --stop_stage 3 "$@" ;;
  no) ;;
  *) echo "slurm_train.sh: prepare=$prepare (expected once, per_node or no)" >&2; exit 2 ;;
esac

# Single quotes: SLURM_NODEID is expanded by each task, on its own node.
srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec bash run.sh --stage 4 --stop_stage 4 \
  --num_nodes "$SLURM_NNODES" --node_rank "$SLURM_NODEID" --master_addr "$master_addr" \
  --master_port "$master_port" --max_restarts "$max_restarts" "$@"' slurm_train.sh "$@"
