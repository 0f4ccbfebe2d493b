"""The engine registry and what it refuses (one line, exit status 2, before training)."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.schema import build
from asrkit.train.dist.context import DistContext
from asrkit.train.engines import ENGINES, DdpEngine, build_engine
from asrkit.train.engines.activations import blocks, checkpoint_activations
from asrkit.train.engines.problems import engine_problems
from tests.helpers import train_here


def test_the_registry_holds_both_engines_and_one_process_or_no_shard_is_ddp(caplog):
    assert set(ENGINES) == {"torch_ddp", "torch_fsdp"}
    fsdp = build(TrainConfig, {"train_engine": "torch_fsdp"})
    with caplog.at_level("INFO", logger="asrkit.train"):
        assert isinstance(build_engine(fsdp, DistContext()), DdpEngine)
    assert "train_engine torch_fsdp with one process, nothing to shard: training as torch_ddp" in caplog.text
    no_shard = build(TrainConfig, {"train_engine": "torch_fsdp", "fsdp_sharding_strategy": "no_shard"})
    assert isinstance(build_engine(no_shard, DistContext()), DdpEngine)


@pytest.mark.parametrize("raw, words", [
    ({"fsdp_cpu_offload": True}, "fsdp_cpu_offload: true keeps a GPU run's shards on the host"),
    ({"dtype": "fp16"}, "dtype: fp16 with train_engine: torch_fsdp"),
    ({"ema_decay": 0.9}, "ema_decay with train_engine: torch_fsdp"),
    ({"ddp_conf": {"comm_hook": "fp16"}}, "ddp_conf.comm_hook: fp16 is a DDP communication hook"),
])
def test_what_fsdp_cannot_run_with(raw, words):
    problems = engine_problems(build(TrainConfig, {"train_engine": "torch_fsdp", **raw}), torch.device("cpu"))
    assert len(problems) == 1 and str(problems[0]).startswith(words), problems
    assert engine_problems(build(TrainConfig, {"train_engine": "torch_fsdp"}), torch.device("cpu")) == []


def test_cpu_offload_on_a_cpu_run_is_one_line_and_status_2(tiny_experiment, tmp_path):
    cfg = tiny_experiment.config(tmp_path / "c.yaml")
    proc = train_here(tiny_experiment, tmp_path / "exp", cfg, "--train_engine", "torch_fsdp", "--fsdp_cpu_offload",
                      check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: cannot start training: fsdp_cpu_offload: true keeps a GPU run's shards on the host (torch supports "
        "it with CUDA only), but this run trains on cpu -- set fsdp_cpu_offload: false"), proc.stderr
    assert not (tmp_path / "exp").exists()


def test_activation_checkpointing_recomputes_the_same_gradients():
    """A checkpointed block gives the gradients of the plain one (dropout replayed) and keeps
    its parameter names."""
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    cfg = build(TrainConfig, {"input_dim": 8, "output_dim": 10, "encoder_conf": {
        "output_size": 16, "attention_heads": 2, "linear_units": 32, "num_blocks": 2, "dropout_rate": 0.3},
        "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1}})
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = build_model(cfg, 8, Vocabulary.of_size(10))
        names = [n for n, _ in model.named_parameters()]
        if ckpt:
            assert checkpoint_activations(model, True, True) == len(blocks(model)["encoder"]) + 1
            assert [n for n, _ in model.named_parameters()] == names
        torch.manual_seed(1)
        out = model(torch.randn(2, 40, 8), torch.tensor([40, 30]), torch.tensor([[3, 4, 5], [6, 7, -1]]),
                    torch.tensor([3, 2]))
        out["loss"].backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
