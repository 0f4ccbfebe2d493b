"""Helpers of the ``asrkit doctor`` tests (tests/bin/test_doctor.py and
tests/net/test_doctor_netns.py): a toy recipe directory, the report's lines, the environment."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.helpers import REPO, run_tool

SOCKET_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# the job the toy recipe trains, as its stage 4 passes it
JOB = ["--config", "conf/train_toy.yaml", "--train_data", "data/train/data.list", "--cv_data", "data/dev/data.list"]
FAST = ["--sizes_mb", "0.25,1", "--repeats", "2"]  # (small all-reduces: seconds, not minutes, on 2 cores)


# a run.sh shaped like examples/digits/s0/run.sh (train_config: the job of JOB)
RUN_SH = """#!/usr/bin/env bash
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
. tools/recipe_defaults.sh
train_config=conf/train_toy.yaml
dir=exp/toy; num_workers=1
. tools/parse_options.sh || exit 1
if [ "$streaming" = true ]; then
  train_config=conf/train_u2pp_conformer_cpu.yaml
fi
run_stage 4 && stage_train 4 config="$train_config" dir="$dir" type="$data_type" \\
  checkpoint="$checkpoint" workers="$num_workers"
"""


def make_recipe(root: Path, corpus, experiment) -> Path:
    """The files stage 0-3 of the digits recipe leave, at the recipe's relative paths, and a
    ``run.sh`` (:data:`RUN_SH`)."""
    for split, folder in (("train", "train"), ("dev", "dev")):
        (root / "data" / folder).mkdir(parents=True)
        shutil.copy(corpus.splits[split].data_list, root / "data" / folder / "data.list")
    (root / "data" / "dict").mkdir()
    shutil.copy(experiment.units, root / "data" / "dict" / "units.txt")
    (root / "conf").mkdir()
    shutil.copy(REPO / "examples" / "digits" / "s0" / "conf" / "train_toy.yaml", root / "conf" / "train_toy.yaml")
    # stage 1: the statistics of the toy config's own filterbank (training refuses others')
    run_tool("compute_cmvn_stats.py", "--train_config", root / "conf" / "train_toy.yaml", "--data_list",
             root / "data" / "train" / "data.list", "--out_cmvn", root / "data" / "train" / "global_cmvn")
    (root / "run.sh").write_text(RUN_SH)
    return root


def lines_of(out: str, status: str) -> list[str]:
    """The report lines of ``out`` with ``status`` (e.g. ``FAIL``)."""
    return [line for line in out.splitlines() if line.startswith(status + " ")]


def doctor_env(**extra) -> dict:
    """This environment without the socket and launch variables, the checkout first on
    ``PYTHONPATH``, plus ``extra``: what a doctor started as a process gets."""
    env = {k: v for k, v in os.environ.items() if k not in SOCKET_VARS}
    env.update(PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)
    return env
