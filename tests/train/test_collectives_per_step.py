"""No collective per micro-batch: with DDP the executor's only own collective while
training is the one all-reduce of each optimizer step (the has-next safety net rides on
it), whatever ``accum_grad`` is.

The ranks are real gloo processes under torchrun, started through ``tests.hooked_train
--count_collectives``, which counts the Python-level collectives (``torch.distributed.
all_reduce``, ``broadcast``, ``all_gather_object``, ``gather_object``, ``barrier``) issued
while an epoch's ``Executor.steps`` runs.  CV and checkpoints are off during the epoch
(``cv_interval``/``save_interval`` 0), so nothing else runs there.  A has-next all-reduce
before every micro-batch (the design this replaced) gives 16 instead of 3 here.
"""
from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import free_port, run_checked, train_args

pytestmark = pytest.mark.slow


def test_one_collective_per_optimizer_step_with_accum_grad_4(tiny_experiment, tmp_path):
    # 48 utterances in batches of 2: 24 batches, 12 per rank, 3 optimizer steps of 4 micro-batches
    cfg = tiny_experiment.config(tmp_path / "c.yaml", accum_grad=4, cv_interval=0, save_interval=0,
                                 dataset_conf={"batch_conf": {"batch_size": 2}})
    counts = tmp_path / "counts"
    run_checked([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                 "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                 "-m", "tests.hooked_train", "--count_collectives", str(counts), "--",
                 *train_args(tiny_experiment, tmp_path / "exp", cfg)])
    for rank in (0, 1):
        got = json.loads((tmp_path / f"counts.rank{rank}").read_text())
        assert got == {"collectives": 3, "steps": 3}, (rank, got)
