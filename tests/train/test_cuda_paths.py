"""The CUDA paths of training that tests/train/test_amp.py leaves out: fp32 and TF32 on the
GPU, the nccl backend with world size 1, two ranks on one GPU with gloo over CUDA tensors
(DDP + CUDA + fp16 autocast with its GradScaler, and a stuck rank ending the job), and an
fp16 checkpoint that resumes exactly, its GradScaler state included.

All are marked ``gpu`` (skipped without CUDA); ``bench/gpu_check.py`` runs them on a GPU
machine, with the fixtures' corpus carried there (``ASRKIT_TEST_CORPUS``).  Two ranks on one
GPU use gloo because nccl refuses two ranks on one device.
"""
from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from asrkit import checkpoint as ckpt
from tests.helpers import REPO, free_port, repo_env, run_checked, train_args, train_here

pytestmark = pytest.mark.gpu

STALL_TIMEOUT_S = 8


def torchrun(exp, model_dir, config, *extra, nproc: int, hooks: tuple = ()) -> list[str]:
    entry = ["-m", "tests.hooked_train", *map(str, hooks), "--"] if hooks else ["-m", "asrkit.bin.train"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
            "127.0.0.1", "--master_port", str(free_port()), *entry, *train_args(exp, model_dir, config),
            *map(str, extra)]


def final_state(model_dir, epoch: int = 0) -> dict:
    return ckpt.load_checkpoint(model_dir / f"epoch_{epoch}.pt")


def assert_trained(state: dict) -> None:
    assert state["train_state"]["step"] > 0 and state["train_state"]["nonfinite_total"] == 0
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


@pytest.fixture()
def tf32_switches():
    """torch's TF32 switches, restored after the test."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
def test_fp32_trains_on_cuda_with_and_without_tf32(tiny_experiment, tmp_path, tf32_switches, tf32):
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    out = tmp_path / "exp"
    proc = train_here(tiny_experiment, out, tiny_experiment.config(tmp_path / "c.yaml", max_epoch=1))
    assert "device cuda:0" in proc.stderr and "mixed precision" not in proc.stderr
    state = final_state(out)
    assert_trained(state)
    assert state["scaler"] == {} and ckpt.read_info(out / "epoch_0.pt")["cv_loss"] > 0


@pytest.mark.slow
def test_nccl_with_world_size_1(tiny_experiment, tmp_path):
    """Training under torchrun with the nccl backend and one rank; then an nccl group of one
    rank as ``init_distributed`` would make it (``device_id``), an all-reduce of a CUDA tensor
    and a DDP step over it (``wrap_ddp`` wraps only from two ranks on)."""
    out = tmp_path / "exp"
    run_checked(torchrun(tiny_experiment, out, tiny_experiment.config(tmp_path / "c.yaml", max_epoch=1),
                         "--dist_backend", "nccl", nproc=1))
    log0 = (out / "log" / "rank0.log").read_text()
    assert "launch via torchrun: backend nccl, world size 1" in log0 and "device cuda:0" in log0
    assert_trained(final_state(out))

    device = torch.device("cuda", 0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60), device_id=device)
    try:
        t = torch.arange(4.0, device=device)
        dist.all_reduce(t)
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).to(device), device_ids=[0])
        model(torch.randn(3, 8, device=device)).sum().backward()
        assert model.module.weight.grad is not None and torch.isfinite(model.module.weight.grad).all()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_on_one_gpu_with_gloo_ddp_and_fp16(tiny_experiment, tmp_path):
    # 3 steps per rank and epoch; the GradScaler's first ~6 steps are calibration skips (on
    # the H200: all 3 of a one-epoch run, so nothing was applied), hence 4 epochs
    cfg = tiny_experiment.config(tmp_path / "c.yaml", dtype="fp16", max_epoch=4, launch={"timeout_s": 60})
    out = tmp_path / "exp"
    run_checked(torchrun(tiny_experiment, out, cfg, "--dist_backend", "gloo", nproc=2))
    for rank in (0, 1):
        log = (out / "log" / f"rank{rank}.log").read_text()
        assert "backend gloo, world size 2" in log and "device cuda:0" in log, log[-2000:]
        assert "mixed precision: fp16 autocast on cuda:0" in log and "GradScaler" in log
    state = final_state(out, epoch=3)
    assert_trained(state)
    assert state["scaler"] and len(state["rng_ranks"]) == 2


@pytest.mark.slow
def test_stuck_rank_on_cuda_ends_the_job_within_the_timeout(tiny_experiment, tmp_path):
    """Rank 1's loader hangs (``tests.hooked_train --stall_rank 1``) in a 2-rank fp16 job on one
    GPU: the job fails within ``launch.timeout_s`` (+ slack), naming rank 1 and its batch."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", dtype="fp16", launch={"timeout_s": STALL_TIMEOUT_S})
    proc = subprocess.run(torchrun(tiny_experiment, tmp_path / "exp", cfg, "--dist_backend", "gloo", nproc=2,
                                   hooks=("--stall_rank", 1)), capture_output=True, text=True, env=repo_env(),
                          cwd=REPO, timeout=240)
    end = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    log1 = (tmp_path / "exp" / "log" / "rank1.log").read_text()
    stalled = float(re.search(r"fault injection .* hangs now \(unix time ([\d.]+)\)", log1).group(1))
    assert STALL_TIMEOUT_S - 1 < end - stalled < STALL_TIMEOUT_S + 20, (end - stalled, out[-3000:])
    assert re.search(r"rank 1 \(host [^)]*\): (STALLED, )?(waiting for train batch 1/\d+ of epoch 0 from the data "
                     r"loader|no batch from the data loader)", out), out[-3000:]


@pytest.mark.slow
def test_fp16_checkpoint_resumes_exactly_with_its_grad_scaler(tiny_experiment, tmp_path):
    """fp16, stopped after 3 steps and resumed with --checkpoint auto: the counters (steps,
    GradScaler calibration skips, faults) and the scaler's state equal an uninterrupted run's,
    the weights agree (CUDA's atomics in some backward kernels allow rounding differences);
    and the scaler state really comes from the checkpoint: a scale planted in step_3.pt is
    the scale the resumed run goes on with."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", dtype="fp16", max_epoch=2, save_interval=3)
    full, parted, planted = tmp_path / "full", tmp_path / "parted", tmp_path / "planted"
    train_here(tiny_experiment, full, cfg)
    for model_dir in (parted, planted):
        train_here(tiny_experiment, model_dir, cfg, "--max_steps", 3)
        assert (model_dir / "step_3.pt").is_file() and ckpt.load_checkpoint(model_dir / "step_3.pt")["scaler"]
    state = ckpt.load_checkpoint(planted / "step_3.pt")
    # Not a power of two: a scaler starting at 65,536 only halves and doubles, so no
    # uninterrupted run reaches it (1024.0 was planted before, which six calibration skips
    # in a row reach on CUDA).
    planted_scale = 300.0
    state["scaler"]["scale"] = planted_scale
    info = {k: v for k, v in ckpt.read_info(planted / "step_3.pt").items() if k not in ("sha256", "bytes")}
    ckpt.save_checkpoint(planted / "step_3.pt", state, info)
    for model_dir in (parted, planted):
        assert "resumed from" in train_here(tiny_experiment, model_dir, cfg, "--checkpoint", "auto").stderr
    a, b = final_state(full, 1), final_state(parted, 1)
    counters = ("epoch", "step", "nonfinite_total", "scaler_skips", "empty_groups")
    assert [a["train_state"][k] for k in counters] == [b["train_state"][k] for k in counters]
    assert a["scaler"] == b["scaler"]
    assert a["scaler"]["scale"] != planted_scale
    assert final_state(planted, 1)["scaler"]["scale"] == planted_scale
    diff = max(float((a["model"][k].float() - b["model"][k].float()).abs().max()) for k in a["model"])
    print(f"fp16 resume: max |weight difference| to the uninterrupted run {diff:.3g}")
    assert diff < 1e-3, diff
