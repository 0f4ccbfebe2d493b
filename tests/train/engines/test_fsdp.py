"""``train_engine: torch_fsdp`` with real gloo processes, proven equivalent to DDP and to one
process, sharded for real, and resumable on another world size and engine.

The set-up is ``tests/train/dist/test_ddp.py``'s (its docstring says why every run below
trains the same global group of utterances per optimizer step): layer-norm conv modules,
dropout 0, no augmentation, 32 distinct utterances in list order, ``grad_clip`` out of
reach so that the per-step pre-clip gradient norm (rank 0's ``train/grad_norm``) exposes a
missing reduce-scatter or a wrong normaliser.  The reference is one process with the
doubled batch; ``test_ddp.py`` shows DDP on 2 ranks equal to it, so FSDP equal to it is
FSDP equal to DDP too."""
from __future__ import annotations

import re

import pytest

from asrkit import checkpoint as ckpt
from tests.helpers import distinct_utterance_list, fork_ranks, train_args, train_here
from tests.train.dist.test_ddp import PLAN_IN_LIST_ORDER, assert_same_grad_norms, assert_same_weights, grad_norms

pytestmark = pytest.mark.slow
B = 4          # per-rank batch
UTTS = 32      # 4 optimizer steps of a global batch of 8


@pytest.fixture(scope="module")
def setup(tiny_experiment, tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    distinct = distinct_utterance_list(tiny_experiment.corpus.splits["train"].data_list, root / "distinct.list", UTTS)

    def cfg(name, batch, accum, **top):
        return tiny_experiment.config(root / name, accum_grad=accum, grad_clip=1e9,
                                      optim_conf={"lr": 0.002, "eps": 1e-3}, cv_interval=0,
                                      dataset_conf={**PLAN_IN_LIST_ORDER, "batch_conf": {"batch_size": batch}}, **top)
    return {"exp": tiny_experiment, "root": root, "list": distinct, "cfg": cfg}


def args(setup, model_dir, config):
    return train_args(setup["exp"], model_dir, config, train_list=setup["list"])


def launch(setup, model_dir, config, *extra, nproc=2):
    """``nproc`` ranks of ``asrkit.bin.train``'s ``main`` with the legacy launch flags, forked by
    a fork server that imported torch, FSDP and ``torch._dynamo`` (which FSDP imports on its
    first use) once (``tests.helpers.fork_ranks``), not again in every rank: ~5 s a process.
    The FSDP runs under torchrun are the fault tests' (``tests/reliability``, parametrised by
    engine)."""
    fork_ranks([[*args(setup, model_dir, config), *map(str, extra)]] * nproc, timeout=120, check=True)


def weights(path):
    return ckpt.load_checkpoint(path)["model"]


@pytest.fixture(scope="module")
def reference(setup):
    """1 process x batch 2B (in this process)."""
    out = setup["root"] / "ref"
    train_here(setup["exp"], out, setup["cfg"]("ref.yaml", 2 * B, 1), train_list=setup["list"])
    return weights(out / "epoch_0.pt"), grad_norms(out)


def logs(model_dir):
    return [(model_dir / "log" / f"rank{r}.log").read_text() for r in (0, 1)]


def assert_sharded(model_dir) -> None:
    """Each rank holds a shard of every parameter (DTensor shards): together exactly all."""
    held = [re.search(r"this rank holds (\d+) of (\d+) elements \(DTensor shards\)", log) for log in logs(model_dir)]
    assert all(held), logs(model_dir)[0][-2000:]
    total = int(held[0].group(2))
    assert 0 < int(held[0].group(1)) < total and int(held[0].group(1)) + int(held[1].group(1)) == total


def collectives_per_step(log: str) -> list[tuple[int, int]]:
    return [(int(a), int(r)) for a, r in re.findall(r"all-gathers (\d+), reduce-scatters (\d+) in the last step", log)]


@pytest.fixture(scope="module")
def zero2(setup):
    """FSDP zero2 on 2 ranks x B (a sharded checkpoint every 2 steps): its model_dir."""
    out = setup["root"] / "zero2"
    launch(setup, out, setup["cfg"]("zero2.yaml", B, 1, save_interval=2), "--train_engine", "torch_fsdp")
    return out


def test_fsdp_zero2_two_ranks_equal_one_rank_double_batch(setup, reference, zero2):
    """zero2 (the default), accum_grad 1: every block a unit -- the tiny model has 2 encoder
    blocks and 1 decoder block, so 4 units with the root; each step gathers each unit once
    (kept to the end of the backward) and reduce-scatters each once."""
    ref_w, ref_norms = reference
    out = zero2
    assert "fsdp_sharding_strategy zero2: 4 units (3 blocks and the root)" in logs(out)[0]
    assert_sharded(out)
    assert collectives_per_step(logs(out)[0]) == [(4, 4)] * 4
    assert_same_grad_norms(grad_norms(out), ref_norms)
    assert_same_weights(weights(out / "epoch_0.pt"), ref_w, atol=1e-5)
    assert sorted(p.name for p in (out / "epoch_0.dcp").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_fsdp_zero3_with_accumulation_and_activation_checkpointing_equal_one_rank(setup, reference):
    """zero3, 2 ranks x B/2 x accum_grad 2, every block's activations recomputed: the same
    steps.  Per step each unit is gathered for each micro-batch's forward and again (all
    but the root) for its backward -- 2 x (4 + 3) -- and reduce-scattered once, after the
    group's last micro-batch only."""
    ref_w, ref_norms = reference
    out = setup["root"] / "zero3"
    config = setup["cfg"]("zero3.yaml", B // 2, 2, encoder_conf={"gradient_checkpointing": True},
                          decoder_conf={"gradient_checkpointing": True})
    launch(setup, out, config, "--train_engine", "torch_fsdp", "--fsdp_sharding_strategy", "zero3",
             "--fsdp_sync_module_states")
    log0 = logs(out)[0]
    assert "fsdp_sync_module_states: rank 0's weights broadcast to every rank before sharding" in log0
    assert "activation checkpointing: 3 block(s) (encoder and decoder)" in log0
    assert_sharded(out)
    assert collectives_per_step(log0) == [(14, 4)] * 4
    assert_same_grad_norms(grad_norms(out), ref_norms)
    assert_same_weights(weights(out / "epoch_0.pt"), ref_w, atol=1e-5)


def copy_checkpoint(src_dir, name, dst_dir):
    """``name`` (``step_2``) of ``src_dir`` -- its .pt, .yaml and shard folder -- into a new ``dst_dir``."""
    import shutil
    dst_dir.mkdir(parents=True)
    for suffix in (".pt", ".yaml"):
        shutil.copy(src_dir / f"{name}{suffix}", dst_dir / f"{name}{suffix}")
    if (src_dir / f"{name}.dcp").is_dir():
        shutil.copytree(src_dir / f"{name}.dcp", dst_dir / f"{name}.dcp")


def test_fsdp_checkpoint_resumes_on_one_rank_and_back_on_two(setup, reference, zero2):
    """FSDP on 2 ranks saved step 2 (sharded); one process (torch_ddp: nothing to shard) resumes
    it with keep_global_batch -- accum_grad 2, the same global batch -- reading the optimizer's
    shards whole, and saves step 3 plainly; FSDP on 2 ranks resumes that plain checkpoint
    (model and optimizer sharded from it) and ends with the reference's weights: no utterance
    lost or repeated, and the same steps as an uninterrupted run."""
    ref_w, ref_norms = reference
    out = setup["root"] / "chain"
    copy_checkpoint(zero2, "step_2", out)
    keep = ["--override", "reference_world_size=2", "--override", "keep_global_batch=true"]
    one = train_here(setup["exp"], out, setup["cfg"]("chain.yaml", B, 1), "--checkpoint", "auto", "--max_steps", 3,
                     *keep, train_list=setup["list"])
    assert "resuming on 1 rank(s) a run saved on 2: the epoch's remaining batches are re-dealt over 1 rank(s) (no " \
           "utterance lost or repeated); global batch kept: 2 per-rank batches per optimizer step (accum_grad 1 -> 2)" \
           in one.stderr, one.stderr[-3000:]
    assert "was written by torch_fsdp: its optimizer state read whole from its shards" in one.stderr
    state = ckpt.load_checkpoint(out / "step_3.pt")
    assert "shards" not in state and state["world"] == {"world_size": 1, "accum_grad": 2}
    launch(setup, out, setup["cfg"]("chain.yaml", B, 1), "--checkpoint", "auto", "--train_engine", "torch_fsdp")
    log0 = logs(out)[0]
    assert "is a plain checkpoint (torch_ddp's): its model and optimizer sharded over 2 ranks" in log0
    assert "global batch kept" in log0 and "epoch 0 data (part of the epoch run by this process): 8 utterances" in log0
    norms = dict(grad_norms(out))
    assert sorted(norms) == [3, 4] and all(norms[s] == pytest.approx(dict(ref_norms)[s], rel=5e-5) for s in (3, 4))
    assert_same_weights(weights(out / "epoch_0.pt"), ref_w, atol=1e-5)


def test_fsdp_checkpoint_resumes_sharded_on_four_ranks(setup, zero2):
    """The 2-rank zero2 step 2 on 4 ranks sharding by model (encoder and decoder as units):
    DCP re-shards model and optimizer 4 ways into the new units, the 16 utterances left in the
    epoch are re-dealt (one step of 4 x B, each trained once), and the log says the global
    batch doubles and how to keep it (accum_grad cannot go below 1)."""
    out = setup["root"] / "four"
    copy_checkpoint(zero2, "step_2", out)
    launch(setup, out, setup["cfg"]("four.yaml", B, 1), "--checkpoint", "auto", "--train_engine", "torch_fsdp",
             "--fsdp_sharding_strategy", "model", nproc=4)
    log0 = (out / "log" / "rank0.log").read_text()
    assert "fsdp_sharding_strategy model: 3 units (encoder, decoder, root)" in log0
    assert "the global batch changes from 2 to 4 per-rank batches per optimizer step (accum_grad 1 -> 1) -- to " \
           "keep it, set reference_world_size: 2 (with accum_grad 1) and keep_global_batch: true" in log0
    assert "parameters sharded over 4 ranks" in log0
    assert "epoch 0 data (part of the epoch run by this process): 16 utterances trained" in log0
    assert "epoch 0 step 3 batch 3/3" in log0 and "step 4 " not in log0  # (position 3 of the re-planned epoch)
    assert ckpt.load_checkpoint(out / "epoch_0.pt")["world"] == {"world_size": 4, "accum_grad": 1}
