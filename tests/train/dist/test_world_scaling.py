"""World-size scaling: ``keep_global_batch`` scales ``accum_grad`` so a config tuned on
``reference_world_size`` ranks keeps its global batch on any number of ranks.

The end-to-end test uses the deterministic configuration of tests/train/dist/test_ddp.py
(distinct utterances of different lengths in list order, layer-norm conv module, no
dropout/augmentation/dither, an unreachable clip, Adam eps 1e-3) and compares the
per-step gradient norms as well as the final weights.  Its 2-rank run also gives each rank a different ``launch`` section: ranks that
differ only there pass the agreement preflight and train.
"""
from __future__ import annotations

import re

import pytest
import torch

from asrkit import checkpoint as ckpt
from asrkit.train.dist import scale_accum_grad
from tests.helpers import distinct_utterance_list, fork_ranks, tensorboard_scalars, train_args, train_here


def test_scaling_rule_and_messages():
    # tuned on 4 ranks x accum 1
    assert scale_accum_grad(1, 2, 4, True)[:2] == (2, "keep_global_batch: the reference (4 rank(s) x accum_grad 1) "
                                                      "sums 4 per-rank batches per optimizer step; on 2 rank(s) "
                                                      "accum_grad 1 -> 2: the same global batch")
    assert scale_accum_grad(1, 1, 4, True)[0] == 4
    assert scale_accum_grad(4, 16, 4, True)[:1] + scale_accum_grad(4, 16, 4, True)[2:] == (1, False)
    # not an integer: nearest, halves up, at least 1 -- and said so
    accum, msg, inexact = scale_accum_grad(1, 3, 4, True)
    assert (accum, inexact) == (1, True)
    assert "4/3 = 1.33 is not an integer and was rounded to the nearest (halves up, at least 1)" in msg
    assert "the global batch is 3 per-rank batches instead of 4 (0.75x the reference)" in msg
    assert scale_accum_grad(3, 2, 1, True)[0] == 2       # 1.5 -> 2 (halves up)
    assert scale_accum_grad(1, 16, 4, True)[:1] == (1,)  # 0.25 -> at least 1: 4x the reference
    assert "(4x the reference)" in scale_accum_grad(1, 16, 4, True)[1]
    # off, or only reported
    assert scale_accum_grad(2, 8, 0, True) == (2, None, False)
    accum, msg, inexact = scale_accum_grad(2, 16, 4, False)
    assert (accum, inexact) == (2, True) and "the global batch is 4x the reference's" in msg


def test_keep_global_batch_needs_a_reference(tiny_experiment, tmp_path, capsys):
    from asrkit.bin.train import main
    split = tiny_experiment.corpus.splits
    code = main(["--config", str(tiny_experiment.config(tmp_path / "c.yaml", keep_global_batch=True)),
                 "--train_data", str(split["train"].data_list), "--cv_data", str(split["dev"].data_list),
                 "--model_dir", str(tmp_path / "exp")])
    assert code == 2 and "keep_global_batch: true needs reference_world_size" in capsys.readouterr().err


@pytest.mark.slow
def test_one_rank_and_two_ranks_keep_the_reference_global_batch(tiny_experiment, tmp_path):
    """reference_world_size 2, accum_grad 1, batch 4: 1 rank runs accum_grad 2, 2 ranks run
    accum_grad 1 -- the same global batch of 8, the same 4 steps, the same gradient norms
    per step, the same weights.  The plan is the list order in static batches of 4, so
    step s is utterances [8s, 8s+8) in both runs: positions 2s, 2s+1 of the one rank, plan
    batches 2s (rank 0) and 2s+1 (rank 1) of the two (see tests/train/dist/test_ddp.py)."""
    same = distinct_utterance_list(tiny_experiment.corpus.splits["train"].data_list, tmp_path / "distinct.list", 32)
    cfg = tiny_experiment.config(tmp_path / "c.yaml", reference_world_size=2, keep_global_batch=True,
                                 accum_grad=1, grad_clip=1e9, optim_conf={"lr": 0.002, "eps": 1e-3},
                                 dataset_conf={"shuffle": False, "list_shuffle": False, "sort": False,
                                               "batch_conf": {"batch_size": 4}}, launch={"timeout_s": 120})
    one = tmp_path / "one"
    train_here(tiny_experiment, one, cfg, train_list=same)

    two = tmp_path / "two"
    argvs = [train_args(tiny_experiment, two, cfg, train_list=same),
             # another launch section on rank 1: allowed to differ
             train_args(tiny_experiment, two, cfg, train_list=same)
             + ["--override", "launch.timeout_s=90", "--override", "launch.dist_backend=gloo",
                "--override", "launch.init_method=tcp://10.9.9.9:1"]]
    results = fork_ranks(argvs)
    assert [r[0] for r in results] == [0, 0], results

    log1 = (one / "log" / "rank0.log").read_text()
    log2 = (two / "log" / "rank0.log").read_text()
    assert "on 1 rank(s) accum_grad 1 -> 2: the same global batch" in log1
    assert "accum_grad 2; world size 1; effective global batch per optimizer step: 2 x that" in log1
    assert "on 2 rank(s) accum_grad 1 -> 1: the same global batch" in log2
    assert "accum_grad 1; world size 2; effective global batch per optimizer step: 2 x that" in log2
    assert "agreement: the 2 ranks have the same config (less launch)" in log2
    for log in (log1, log2):
        assert re.search(r"step 4 ", log) and not re.search(r"step 5 ", log)
    norms1, norms2 = (tensorboard_scalars(d / "tensorboard", "train/grad_norm") for d in (one, two))
    assert [s for s, _ in norms1] == [s for s, _ in norms2] == [1, 2, 3, 4]
    for (step, x), (_, y) in zip(norms1, norms2):  # summation-order noise: < 4e-6 relative (measured)
        assert x == pytest.approx(y, rel=5e-5), f"step {step}: grad_norm {x} vs {y} ({norms1} vs {norms2})"
    a, b = (ckpt.load_checkpoint(d / "epoch_0.pt")["model"] for d in (one, two))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=2e-5, msg=k)
    # train.yaml keeps the config as written, so it rescales on any world size
    assert "accum_grad: 1\n" in (one / "train.yaml").read_text()
