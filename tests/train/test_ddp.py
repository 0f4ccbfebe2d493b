"""DDP with real gloo processes on CPU, proven equivalent to one process.

Deterministic configuration: layer-norm conv module, dropout 0, no augmentation, no
dither, and a training list of identical utterances (so every batch of a given size is
the same batch, wherever the sampler deals it).  Adam's ``eps`` is 1e-3: some gradients
are exactly zero in exact arithmetic (attention key biases: softmax ignores a shift), and
with eps 1e-9 Adam turns their float rounding noise into full learning-rate steps that
differ between any two summation orders.
"""
from __future__ import annotations

import re
import sys

import pytest
import torch

from asrkit.train import checkpoint as ckpt
from tests.helpers import REPO, free_port, identical_utterance_list, run_checked, train_args

pytestmark = pytest.mark.slow
B = 4          # per-rank batch
UTTS = 32      # 4 optimizer steps of a global batch of 8


@pytest.fixture(scope="module")
def setup(tiny_experiment, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    same = identical_utterance_list(tiny_experiment.corpus.splits["train"].data_list, root / "same.list", UTTS)
    cfg = lambda name, batch, accum: tiny_experiment.config(
        root / name, accum_grad=accum, optim_conf={"lr": 0.002, "eps": 1e-3},
        dataset_conf={"batch_conf": {"batch_size": batch}})
    return {"exp": tiny_experiment, "root": root, "list": same, "cfg": cfg}


def args(setup, model_dir, config):
    return train_args(setup["exp"], model_dir, config, train_list=setup["list"])


def final(model_dir):
    return ckpt.load_checkpoint(model_dir / "epoch_0.pt")["model"]


def cv_loss(stderr):
    return float(re.search(r"CV epoch 0: loss ([0-9.]+)", stderr).group(1))


def assert_same_weights(a, b, atol=2e-5):
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=atol, msg=k)


@pytest.fixture(scope="module")
def reference(setup):
    """1 rank x batch 2B."""
    out = setup["root"] / "ref"
    proc = run_checked([sys.executable, "-m", "asrkit.bin.train", *args(setup, out, setup["cfg"]("ref.yaml", 2 * B, 1))])
    return final(out), cv_loss(proc.stderr)


def test_two_ranks_equal_one_rank_double_batch_and_accumulation(setup, reference):
    ref_w, ref_cv = reference
    acc = setup["root"] / "accum"
    run_checked([sys.executable, "-m", "asrkit.bin.train", *args(setup, acc, setup["cfg"]("acc.yaml", B, 2))])
    assert_same_weights(final(acc), ref_w)

    ddp = setup["root"] / "ddp"
    proc = run_checked([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                        "-m", "asrkit.bin.train", *args(setup, ddp, setup["cfg"]("ddp.yaml", B, 1))])
    log0 = (ddp / "log" / "rank0.log").read_text()
    assert "world size 2" in log0 and (ddp / "log" / "rank1.log").is_file()
    assert "effective global batch per optimizer step: 2 x that" in log0
    assert_same_weights(final(ddp), ref_w)
    # sharded CV: the dev set split over 2 ranks gives the 1-rank CV loss
    assert cv_loss(log0) == pytest.approx(ref_cv, rel=1e-4)
    assert "step 4 " in log0 and "step 4 " in (ddp / "log" / "rank1.log").read_text()


def test_two_torchrun_nodes_on_localhost(setup, reference):
    out = setup["root"] / "nodes"
    port = free_port()
    cmd = " ".join([
        "pids=(); for n in 0 1; do", sys.executable, "-m torch.distributed.run --nnodes 2 --node_rank $n",
        "--nproc_per_node 1 --master_addr 127.0.0.1 --master_port", str(port),
        "-m asrkit.bin.train", *[f"'{a}'" for a in args(setup, out, setup["cfg"]("nodes.yaml", B, 1))],
        "> " + str(setup["root"]) + "/node$n.out 2>&1 & pids+=($!); done; rc=0;",
        "for p in ${pids[@]}; do wait $p || rc=1; done; exit $rc"])
    run_checked(cmd)
    assert "world size 2 (2 node(s) x 1)" in (out / "log" / "rank0.log").read_text()
    assert_same_weights(final(out), reference[0])


@pytest.mark.parametrize("method", ["tcp", "file"])
def test_legacy_shell_loop_launch(setup, reference, method):
    out = setup["root"] / f"legacy_{method}"
    init = (f"tcp://127.0.0.1:{free_port()}" if method == "tcp"
            else f"file://{setup['root']}/init_{method}")
    cmd = " ".join([
        "pids=(); for r in 0 1; do", sys.executable, "-m asrkit.bin.train",
        *[f"'{a}'" for a in args(setup, out, setup["cfg"](f"{method}.yaml", B, 1))],
        "--rank $r --world_size 2 --dist_backend gloo --init_method", init,
        "> " + str(setup["root"]) + f"/{method}$r.out 2>&1 & pids+=($!); done; rc=0;",
        "for p in ${pids[@]}; do wait $p || rc=1; done; exit $rc"])
    run_checked(cmd, env={"RANK": "", "WORLD_SIZE": ""})
    assert "launch via flags" in (out / "log" / "rank0.log").read_text()
    assert_same_weights(final(out), reference[0])


def test_stale_file_init_is_refused(setup, tmp_path):
    import os
    import time
    stale = tmp_path / "init"
    stale.write_text("")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    proc = run_checked(f"{sys.executable} -m asrkit.bin.train "
                       + " ".join(f"'{a}'" for a in args(setup, tmp_path / "x", setup['cfg']('st.yaml', B, 1)))
                       + f" --rank 0 --world_size 2 --init_method file://{stale}; test $? = 2",
                       env={"RANK": "", "WORLD_SIZE": ""})
    assert "left over from an earlier run" in proc.stderr
