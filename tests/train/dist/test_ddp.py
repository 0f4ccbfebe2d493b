"""DDP with real gloo processes on CPU, proven equivalent to one process.

Deterministic configuration: layer-norm conv module, dropout 0, no augmentation, no
dither.  Adam's ``eps`` is 1e-3: some gradients are exactly zero in exact arithmetic
(attention key biases: softmax ignores a shift), and with eps 1e-9 Adam turns their float
rounding noise into full learning-rate steps that differ between any two summation orders.

The training list holds 32 *distinct* utterances of different lengths and the clip is
unreachable (``grad_clip: 1e9``), so the global pre-clip gradient norm of every step --
rank 0's ``train/grad_norm`` TensorBoard scalar -- exposes a missing gradient all-reduce, a
misapplied ``no_sync`` or a wrong normaliser; the tests compare it per step, as well as
the final weights.

Why every configuration sees the same global group of utterances per optimizer step:
``shuffle``, ``list_shuffle`` and ``sort`` are off, so the epoch plan is the list order cut
into static batches (``asrkit.data.sampler``: plan batch ``j`` holds utterances
``[j*b, (j+1)*b)`` for batch size ``b``), 32 is a multiple of every ``b * world_size`` here
(no batch is split), and rank ``r`` of ``W`` gets plan batches ``r, r+W, r+2W, ...``:

* 1 rank x 2B: step ``s`` trains plan batch ``s`` = utterances ``[2Bs, 2B(s+1))``;
* 1 rank x B, accum_grad 2: positions ``2s, 2s+1`` = utterances ``[2Bs, 2B(s+1))``;
* 2 ranks x B: rank ``r`` trains plan batch ``2s+r``: together ``[2Bs, 2B(s+1))``;
* 2 ranks x B/2, accum_grad 2: rank ``r``'s positions ``2s, 2s+1`` are plan batches
  ``4s+r, 4s+2+r`` of B/2: together ``4s .. 4s+3`` = utterances ``[2Bs, 2B(s+1))``.
"""
from __future__ import annotations

import re
import sys

import pytest
import torch

from asrkit import checkpoint as ckpt
from asrkit.models.asr_model import AsrModel
from asrkit.models.chunks import FULL_CONTEXT
from tests.helpers import (distinct_utterance_list, fork_ranks, free_port, run_checked, tensorboard_scalars, train_args,
                           train_here)
from tests.train.chunk_recorder import chunk_of_each_utterance, read_records, recording_encode

pytestmark = pytest.mark.slow
B = 4          # per-rank batch
UTTS = 32      # 4 optimizer steps of a global batch of 8
PLAN_IN_LIST_ORDER = {"shuffle": False, "list_shuffle": False, "sort": False}


@pytest.fixture(scope="module")
def setup(tiny_experiment, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    distinct = distinct_utterance_list(tiny_experiment.corpus.splits["train"].data_list, root / "distinct.list", UTTS)
    cfg = lambda name, batch, accum: tiny_experiment.config(  # (with a weight EMA: it never feeds back)
        root / name, accum_grad=accum, grad_clip=1e9, optim_conf={"lr": 0.002, "eps": 1e-3}, ema_decay=0.9,
        dataset_conf={**PLAN_IN_LIST_ORDER, "batch_conf": {"batch_size": batch}})
    return {"exp": tiny_experiment, "root": root, "list": distinct, "cfg": cfg}


def args(setup, model_dir, config):
    return train_args(setup["exp"], model_dir, config, train_list=setup["list"])


def final(model_dir):
    return ckpt.load_checkpoint(model_dir / "epoch_0.pt")["model"]


def final_ema(model_dir):
    return ckpt.load_checkpoint(model_dir / "epoch_0.pt")["ema"]["shadow"]


def grad_norms(model_dir) -> list:
    """[(step, global pre-clip gradient norm)] of every optimizer step, from rank 0's TensorBoard."""
    return tensorboard_scalars(model_dir / "tensorboard", "train/grad_norm")


def assert_same_grad_norms(got, ref, rel=5e-5):
    """Per-step gradient norms equal up to summation-order noise (measured on 2 CPU cores:
    3.4e-6 relative at most, norms 48-81; a lost all-reduce or a normaliser off by the
    world size moves them by tens of percent)."""
    assert [s for s, _ in got] == [s for s, _ in ref] == list(range(1, UTTS // (2 * B) + 1)), (got, ref)
    for (step, a), (_, b) in zip(got, ref):
        assert a == pytest.approx(b, rel=rel), f"step {step}: grad_norm {a} vs {b} (all: {got} vs {ref})"


def cv_loss(stderr):
    return float(re.search(r"CV epoch 0: loss ([0-9.]+)", stderr).group(1))


def assert_same_weights(a, b, atol=2e-5):
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=atol, msg=k)


@pytest.fixture(scope="module")
def reference(setup):
    """1 rank x batch 2B."""
    out = setup["root"] / "ref"
    proc = train_here(setup["exp"], out, setup["cfg"]("ref.yaml", 2 * B, 1), train_list=setup["list"])
    return final(out), cv_loss(proc.stderr), grad_norms(out), final_ema(out)


def test_two_ranks_equal_one_rank_double_batch_and_accumulation(setup, reference):
    """... and the weight EMA of the 2-rank run (rank 0's shadow of the unwrapped module,
    saved with the unwrapped names) equals the 1-rank run's."""
    ref_w, ref_cv, ref_norms, ref_ema = reference
    acc = setup["root"] / "accum"
    train_here(setup["exp"], acc, setup["cfg"]("acc.yaml", B, 2), train_list=setup["list"])
    assert_same_grad_norms(grad_norms(acc), ref_norms)
    assert_same_weights(final(acc), ref_w)

    ddp = setup["root"] / "ddp"
    run_checked([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                        "-m", "asrkit.bin.train", *args(setup, ddp, setup["cfg"]("ddp.yaml", B, 1))])
    log0 = (ddp / "log" / "rank0.log").read_text()
    assert "world size 2" in log0 and (ddp / "log" / "rank1.log").is_file()
    assert "effective global batch per optimizer step: 2 x that" in log0
    assert_same_grad_norms(grad_norms(ddp), ref_norms)
    assert_same_weights(final(ddp), ref_w)
    assert_same_weights(final_ema(ddp), ref_ema)
    # sharded CV: the dev set split over 2 ranks gives the 1-rank CV loss
    assert cv_loss(log0) == pytest.approx(ref_cv, rel=1e-4)
    assert "step 4 " in log0 and "step 4 " in (ddp / "log" / "rank1.log").read_text()


def test_two_ranks_half_batch_with_accumulation_equal_one_rank_double_batch(setup, reference):
    """DDP and accumulation together: 2 ranks x B/2 x accum_grad 2 (the gradient all-reduce
    runs on the second micro-batch of each group only, under ``no_sync`` on the first)."""
    ref_w, ref_cv, ref_norms, _ = reference
    out = setup["root"] / "ddp_accum"
    argv = args(setup, out, setup["cfg"]("ddp_accum.yaml", B // 2, 2))
    fork_ranks([argv, argv], check=True)  # (from the fork server: torchrun's launch is the test above's)
    log0 = (out / "log" / "rank0.log").read_text()
    assert "accum_grad 2; world size 2; effective global batch per optimizer step: 4 x that" in log0
    assert re.search(r"step 4 ", log0) and not re.search(r"step 5 ", log0)
    assert_same_grad_norms(grad_norms(out), ref_norms)
    assert_same_weights(final(out), ref_w)
    assert cv_loss(log0) == pytest.approx(ref_cv, rel=1e-4)


def test_dynamic_chunks_two_ranks_with_accumulation_equal_one_rank_with_double_accumulation(
        setup, monkeypatch):
    """Dynamic chunks with dynamic left chunks (causal convolution): 2 ranks x B/2 x
    accum_grad 2 against 1 rank x B/2 x accum_grad 4.  Both train plan batches ``4s .. 4s+3``
    at step ``s`` (rank ``r``'s positions ``2s, 2s+1`` are plan batches ``4s+r, 4s+2+r``), and
    the draw's micro-batch index (``asrkit.models.chunks``) is the plan batch's place in the
    group, so every utterance trains with the same chunk choice in both jobs; with the chunks
    applied, the gradient norms of every step and the final weights agree too."""
    cfg = lambda name, accum: setup["exp"].config(
        setup["root"] / name, accum_grad=accum, grad_clip=1e9, optim_conf={"lr": 0.002, "eps": 1e-3},
        encoder_conf={"use_dynamic_chunk": True, "use_dynamic_left_chunk": True, "causal": True},
        dataset_conf={**PLAN_IN_LIST_ORDER, "batch_conf": {"batch_size": B // 2}})
    one, two = setup["root"] / "chunks_one", setup["root"] / "chunks_two"
    monkeypatch.setattr(AsrModel, "encode", recording_encode(setup["root"] / "chunks_one.jsonl"))
    train_here(setup["exp"], one, cfg("chunks_one.yaml", 4), train_list=setup["list"])
    run_checked([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                 "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                 "-m", "tests.train.chunk_recorder", str(setup["root"] / "chunks_two.jsonl"), "--",
                 *args(setup, two, cfg("chunks_two.yaml", 2))])
    records_one = read_records(setup["root"] / "chunks_one.jsonl")
    records_two = read_records(setup["root"] / "chunks_two.jsonl")
    assert {r["rank"] for r in records_two} == {0, 1}
    by_utt = chunk_of_each_utterance(records_one)
    assert len(by_utt) == UTTS and chunk_of_each_utterance(records_two) == by_utt
    # not vacuous: indices 1 and 2 of some group draw differently (the index (position mod
    # accum_grad) x world_size + rank puts rank 0's second micro-batch at 2, a rank-major
    # index would put it at 1), and the draws hold full context, chunks and left chunks
    drawn = [tuple(r["chunk"]) for r in records_one if r["training"]]
    assert len(drawn) == UTTS // (B // 2) and any(drawn[4 * s + 1] != drawn[4 * s + 2] for s in range(4)), drawn
    assert FULL_CONTEXT in drawn and any(left >= 0 for _, left in drawn), drawn
    cv = chunk_of_each_utterance(records_two, training=False)
    assert cv and all(choices == [FULL_CONTEXT] for choices in cv.values())
    assert_same_grad_norms(grad_norms(two), grad_norms(one))
    assert_same_weights(final(two), final(one))


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
    assert_same_grad_norms(grad_norms(out), reference[2])
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
    assert_same_grad_norms(grad_norms(out), reference[2])
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
