"""DDP communication hooks (``ddp_conf.comm_hook``, asrkit.train.dist.comm_hooks) with real
2-process gloo groups on CPU: fp16/bf16 gradients equal the uncompressed ones within their
precision, PowerSGD trains and resumes deterministically, bf16 is refused where the backend
cannot all-reduce it, bad ``ddp_conf`` values are config errors, and the ranks' agreement
preflight covers the section (it is not ``launch``).
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.multiprocessing as mp

from asrkit.config import TrainConfig, to_dict

from asrkit.schema import ConfigError, build
from asrkit.train import agreement as A
from asrkit.train.dist import comm_hook_problem
from tests.helpers import fork_ranks, free_port, spawn_ranks, tiny_config_dict, train_args
from tests.train.dist import comm_hook_worker

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)
# fp16's smallest normal number: below it fp16 keeps no relative precision (the attention key
# biases, whose exact gradient is 0, carry rounding noise of ~1e-9 that fp16 flushes to 0).
FP16_TINY = 6.1e-5


@pytest.fixture(scope="module")
def hooked(tmp_path_factory):
    """Rank 0's results of tests/train/dist/comm_hook_worker.py (2 gloo processes); ``_dir``: the
    folder of both ranks' files."""
    out = tmp_path_factory.mktemp("comm_hooks")
    try:
        spawn_ranks(comm_hook_worker.run, (free_port(), str(out)))
        failure = None
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as e:  # (a collective mismatch: gloo
        # aborts a process, or a hook callback raises)
        failure = str(e)
    return dict(torch.load(out / "rank0.pt", weights_only=True), _dir=out, _failure=failure)


def _assert_close_to(got: list, ref: list, rel: float, what: str) -> float:
    """Every gradient tensor within ``rel`` of the reference's largest element (at least
    :data:`FP16_TINY`); returns the largest relative difference seen."""
    worst = 0.0
    for i, (g, r) in enumerate(zip(got, ref)):
        scale = max(float(r.abs().max()), FP16_TINY)
        diff = float((g - r).abs().max()) / scale
        assert diff <= rel, f"{what}: parameter {i} differs by {diff:.2e} of its largest gradient (> {rel})"
        worst = max(worst, diff)
    return worst


def test_compressed_gradients_match_uncompressed_within_their_precision(hooked):
    for grads in ("grads", "accum_grads"):  # one backward; two micro-batches, the first under no_sync
        ref = hooked[grads]["none"]
        # fp16: 11 significant bits (2^-11 = 4.9e-4 per rounding; cast, sum, cast back)
        fp16 = _assert_close_to(hooked[grads]["fp16"], ref, 2e-3, f"{grads} fp16")
        # bf16: 8 significant bits (2^-8 = 3.9e-3 per rounding)
        bf16 = _assert_close_to(hooked[grads]["bf16"], ref, 1.6e-2, f"{grads} bf16")
        assert fp16 > 0 and bf16 > fp16, "the 16-bit hooks did not compress (no rounding at all)"
        # PowerSGD's first all-reduces are plain: the uncompressed gradients
        _assert_close_to(hooked[grads]["powersgd"], ref, 1e-6, f"{grads} powersgd before its start")


def test_powersgd_trains_and_compresses(hooked):
    losses = hooked["powersgd_losses"]
    assert losses[-1] < 0.8 * losses[0], losses
    rate, before, after = hooked["powersgd_stats"]
    assert rate > 4 and after < before / 4, hooked["powersgd_stats"]  # rank 1 of 32..64-wide matrices


def test_powersgd_resume_is_deterministic(hooked):
    first, second = hooked["resumed"]
    assert first["start"] == second["start"] == 2  # max(2, 6 - 5)
    assert first["compressed"] and second["compressed"]
    for a, b in zip(first["weights"], second["weights"]):
        assert torch.equal(a, b)


def test_powersgd_recovers_after_a_non_finite_gradient(hooked):
    """A NaN gradient poisons PowerSGD's error feedback; the hook drops that memory, so only
    the faulty step is non-finite (the executor skips it) and the next one is clean."""
    assert hooked["finite_after_nan"] == [True, True, False, True]


def test_ddp_broadcasts_state_buffers_but_not_constant_tables(hooked):
    """wrap_ddp leaves the buffers outside the state dict (positional-encoding tables) out of
    DDP's per-forward broadcast; state-dict buffers still take rank 0's values."""
    rank1 = torch.load(hooked["_dir"] / "rank1.pt", weights_only=True)["buffers"]
    assert hooked["buffers"] == {"stats": [0.0, 0.0], "table": [0.0, 0.0]}
    assert rank1 == {"stats": [0.0, 0.0], "table": [1.0, 1.0]}


def test_powersgd_over_many_buckets_keeps_the_ranks_in_step(hooked):
    """Every rank sends PowerSGD's all-reduces bucket after bucket in the same order."""
    assert hooked["_failure"] is None, hooked["_failure"]
    result = torch.load(hooked["_dir"] / "buckets_rank0.pt", weights_only=True)
    assert result == {"steps": 8, "iter": 8, "compressed": True}


def test_ddp_conf_validation():
    def errors(ddp_conf) -> str:
        with pytest.raises(ConfigError) as e:
            build(TrainConfig, tiny_config_dict(ddp_conf=ddp_conf))
        return str(e.value)

    assert "ddp_conf.comm_hook: must be one of ['none', 'fp16', 'bf16', 'powersgd'], got 'fp8'" in \
        errors({"comm_hook": "fp8"})
    assert "ddp_conf.powersgd_rank: must be > 0, got 0" in errors({"powersgd_rank": 0})
    assert "ddp_conf.powersgd_start_iter: must be >= 2 (DDP rebuilds its gradient buckets" in \
        errors({"powersgd_start_iter": 1})
    assert "ddp_conf.hook: unknown key; did you mean ddp_conf.comm_hook?" in errors({"hook": "fp16"})
    cfg = build(TrainConfig, tiny_config_dict(ddp_conf={"comm_hook": "powersgd", "powersgd_rank": 2}))
    assert (cfg.ddp_conf.comm_hook, cfg.ddp_conf.powersgd_rank, cfg.ddp_conf.powersgd_start_iter) == \
        ("powersgd", 2, 1000)


def test_bf16_refused_where_the_backend_cannot_all_reduce_it(tiny_experiment, tmp_path):
    assert comm_hook_problem("bf16", "nccl", CUDA) is None
    assert comm_hook_problem("bf16", "gloo", CPU) is None  # torch 2.14's gloo: see the gradients test
    for hook in ("none", "fp16", "powersgd"):
        assert comm_hook_problem(hook, "gloo", CUDA) is None
    from asrkit.bin.train import build_parser, job_from_args
    from asrkit.train.preflight import preflight
    config = tiny_experiment.config(tmp_path / "bf16.yaml", ddp_conf={"comm_hook": "bf16"})
    job = job_from_args(build_parser().parse_args(train_args(tiny_experiment, tmp_path / "exp", config)))
    cfg = build(TrainConfig, __import__("yaml").safe_load(config.read_text()))
    problems = preflight(cfg, dataclasses.replace(job, device="cuda"), "gloo")  # a gloo run on GPUs
    assert [str(p) for p in problems] == [
        "ddp_conf.comm_hook: bf16 needs a backend that all-reduces bfloat16 tensors on this device (nccl, or "
        "gloo on CPU), but this run uses gloo on cuda -- use comm_hook: fp16 (same bytes, fp16 range) or "
        "dist_backend: nccl"]
    assert preflight(cfg, dataclasses.replace(job, device="cpu"), "gloo") == []


def test_agreement_covers_ddp_conf():
    """ddp_conf is part of the config every rank must agree on (only launch may differ)."""
    cfg0 = to_dict(TrainConfig())
    cfg1 = copy.deepcopy(cfg0)
    cfg1["ddp_conf"]["comm_hook"] = "fp16"
    cfg1["launch"]["timeout_s"] = 60.0
    fps = [dict(A.fingerprint(c, {}), rank=r, host=f"n{r}") for r, c in enumerate((cfg0, cfg1))]
    msg = A.disagreement_message(fps, [A.comparable_config(cfg0), A.comparable_config(cfg1)])
    assert 'config key ddp_conf.comm_hook (rank 1: "fp16", rank 0: "none")' in msg
    assert "timeout_s" not in msg


@pytest.mark.slow
def test_ranks_with_different_hooks_refuse_to_start(tiny_experiment, tmp_path):
    cfg = tiny_experiment.config(tmp_path / "c.yaml")
    argvs = [train_args(tiny_experiment, tmp_path / "exp", cfg),
             train_args(tiny_experiment, tmp_path / "exp", cfg) + ["--override", "ddp_conf.comm_hook=powersgd"]]
    results = fork_ranks(argvs, timeout=120)
    assert [r[0] for r in results] == [2, 2], results
    assert 'config key ddp_conf.comm_hook (rank 1: "powersgd", rank 0: "none")' in results[0][2]


@pytest.mark.slow
def test_trainer_with_powersgd_resumes(tiny_experiment, tmp_path):
    """asrkit.bin.train on 2 gloo ranks with PowerSGD: stopped at step 4, resumed with
    --checkpoint auto (empty error feedback, compression from the resumed process's 2nd
    all-reduce), trained to the end with a lower CV loss than after its first epoch."""
    cfg = tiny_experiment.config(tmp_path / "p.yaml", max_epoch=3,
                                 ddp_conf={"comm_hook": "powersgd", "powersgd_start_iter": 3})
    exp = tmp_path / "exp"
    argv = train_args(tiny_experiment, exp, cfg)
    first = fork_ranks([argv + ["--max_steps", "4"]] * 2, timeout=150)
    assert [r[0] for r in first] == [0, 0], first
    log0 = (exp / "log" / "rank0.log").read_text()
    assert "ddp_conf.comm_hook powersgd: rank-1 PowerSGD with error feedback and warm start after 3" in log0
    second = fork_ranks([argv + ["--checkpoint", "auto"]] * 2, timeout=150)
    assert [r[0] for r in second] == [0, 0], second
    log0 = (exp / "log" / "rank0.log").read_text()
    assert "resumed at step 4 with empty error feedback; compression from all-reduce 2 of this process" in log0
    cv = [float(line.split("loss ")[1].split()[0]) for line in log0.splitlines() if ": CV epoch " in line]
    assert len(cv) >= 2 and cv[-1] < cv[0], cv
    assert "comm_hook: powersgd" in (exp / "train.yaml").read_text()

