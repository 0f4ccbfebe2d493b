"""Mixed precision and SyncBatchNorm: SyncBatchNorm refused before training where it cannot
run (CPU, gloo; mixed precision on a CPU: tests/train/test_cpu_precision.py); on CUDA fp16 trains with a GradScaler (calibration skips are not faults), bf16
without one, CTC in fp32; SyncBatchNorm converts the batch-norm conv modules.

GPU tests are marked ``gpu`` (skipped without CUDA); the SyncBatchNorm run needs 2 GPUs.
"""
from __future__ import annotations

import sys

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit import checkpoint as ckpt
from asrkit.train import dist as D
from tests.helpers import free_port, random_batch, run_checked, tiny_config_dict, train_args
from asrkit.text.vocabulary import Vocabulary


def _main(exp, tmp_path, capsys, config, *extra):
    from asrkit.bin.train import main
    split = exp.corpus.splits
    code = main(["--config", str(config), "--train_data", str(split["train"].data_list), "--cv_data",
                 str(split["dev"].data_list), "--model_dir", str(tmp_path / "exp"), *extra])
    return code, capsys.readouterr().err


def test_sync_batchnorm_refused_on_gloo_before_training(tiny_experiment, tmp_path, capsys):
    sbn = tiny_experiment.config(tmp_path / "sbn.yaml", sync_batchnorm=True,
                                 encoder_conf={"cnn_module_norm": "batch_norm"})
    code, err = _main(tiny_experiment, tmp_path, capsys, sbn, "--dist_backend", "gloo")
    assert code == 2 and "sync_batchnorm: true needs CUDA GPUs and the nccl backend" in err
    assert "uses the gloo backend on" in err and "-- set sync_batchnorm: false" in err
    assert not (tmp_path / "exp").exists()


def test_sync_batchnorm_check_and_count():
    assert D.check_sync_batchnorm("gloo", torch.device("cpu"))
    assert D.check_sync_batchnorm("gloo", torch.device("cuda", 0))
    assert D.check_sync_batchnorm("nccl", torch.device("cuda", 0)) is None
    cfg = build(TrainConfig, tiny_config_dict(encoder_conf={"output_size": 32, "attention_heads": 2,
                                                             "num_blocks": 2, "cnn_module_norm": "batch_norm"}))
    from asrkit.models import build_model
    assert D.count_batchnorm(build_model(cfg, 80, Vocabulary.of_size(10))) == 2


def test_ctc_stays_fp32_under_autocast():
    """CPU autocast (bf16) stands in for CUDA fp16: the CTC loss is computed in fp32."""
    from asrkit.models import build_model
    torch.manual_seed(0)
    model = build_model(build(TrainConfig, tiny_config_dict()), 80, Vocabulary.of_size(10))
    batch = random_batch(torch.Generator().manual_seed(0), 3)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
    assert out["loss_ctc"].dtype == torch.float32 and torch.isfinite(out["loss_ctc"])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_mixed_precision_trains_on_cuda(tiny_experiment, tmp_path, dtype):
    if dtype == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    cfg = tiny_experiment.config(tmp_path / "c.yaml", dtype=dtype, max_epoch=2)
    out = tmp_path / "exp"
    proc = run_checked([sys.executable, "-m", "asrkit.bin.train", *train_args(tiny_experiment, out, cfg)])
    assert f"mixed precision: {dtype} autocast on cuda" in proc.stderr
    state = ckpt.load_checkpoint(out / "epoch_1.pt")
    assert state["train_state"]["nonfinite_total"] == 0 and state["train_state"]["step"] > 0
    if dtype == "fp16":
        assert "GradScaler" in proc.stderr and state["scaler"]  # scaler state saved for resume
    else:
        assert state["scaler"] == {}
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    assert ckpt.read_info(out / "epoch_1.pt")["cv_loss"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="SyncBatchNorm across ranks needs 2 GPUs")
def test_sync_batchnorm_on_two_gpus(tiny_experiment, tmp_path):
    cfg = tiny_experiment.config(tmp_path / "c.yaml", sync_batchnorm=True,
                                 encoder_conf={"cnn_module_norm": "batch_norm"})
    out = tmp_path / "exp"
    run_checked([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                 "127.0.0.1", "--master_port", str(free_port()), "-m", "asrkit.bin.train",
                 *train_args(tiny_experiment, out, cfg)])
    log0 = (out / "log" / "rank0.log").read_text()
    assert "2 BatchNorm layer(s) converted to SyncBatchNorm" in log0 and "backend nccl" in log0
    state = ckpt.load_checkpoint(out / "epoch_0.pt")["model"]
    assert any(k.endswith("norm.running_mean") for k in state)  # same keys as plain BatchNorm
