"""Weight EMA (``asrkit.train.ema``): the update rule, updated only after applied steps,
saved and resumed exactly, and decodable as ``average_model --mode ema`` writes it."""
from __future__ import annotations

import pytest
import torch

from asrkit.bin import average_model
from asrkit.config import TrainConfig
from asrkit.schema import ConfigError, build
from asrkit.trained_model import build_trained_model
from asrkit.config_files import load_text_inputs
from asrkit.config import load_config
from asrkit import checkpoint as ckpt
from asrkit.train.ema import WeightEma, ema_weights
from tests.helpers import train_here

pytestmark = pytest.mark.usefixtures("restore_threads")


def test_the_shadow_follows_the_rule_in_fp32_and_copies_integer_buffers():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).to(torch.bfloat16)
    ema = WeightEma(model, 0.9)
    start = {k: v.float().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model[0].weight.add_(1.0)
        model[1].num_batches_tracked.fill_(7)
    ema.update(model)  # n = 0: d = min(0.9, 1/10) = 0.1
    expected = 0.1 * start["0.weight"] + 0.9 * model[0].weight.float()
    assert ema.shadow["0.weight"].dtype == torch.float32
    torch.testing.assert_close(ema.shadow["0.weight"], expected)
    assert int(ema.shadow["1.num_batches_tracked"]) == 7 and ema.updates == 1
    for _ in range(200):
        ema.update(model)
    assert ema.current_decay() == 0.9
    weights = ema_weights(ema.state_dict(), model.state_dict())
    assert weights["0.weight"].dtype == torch.bfloat16


def test_ema_decay_is_checked_at_load():
    assert build(TrainConfig, {}).ema_decay is None
    with pytest.raises(ConfigError, match="ema_decay: must be in"):
        build(TrainConfig, {"ema_decay": 1.0})


@pytest.mark.slow
def test_a_stopped_and_resumed_run_ends_with_the_shadow_of_an_uninterrupted_one(tiny_experiment, tmp_path):
    """As the optimizer's exact-resume tests: stopped after step 3 of 6 (mid-epoch) and
    resumed with --checkpoint auto, the epoch checkpoint's EMA equals the uninterrupted
    run's; the shadow is not the weights; `average_model --mode ema` writes it as a model
    that recognize's loader builds."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", ema_decay=0.99, save_interval=1,
                                 dataset_conf={"batch_conf": {"batch_size": 8}})
    full, parted = tmp_path / "full", tmp_path / "parted"
    train_here(tiny_experiment, full, cfg)
    first = train_here(tiny_experiment, parted, cfg, "--max_steps", 3)
    assert "reached max_steps=3" in first.stderr
    assert ckpt.load_checkpoint(parted / "step_3.pt")["ema"]["updates"] == 3
    second = train_here(tiny_experiment, parted, cfg, "--checkpoint", "auto")
    assert "(mid-epoch)" in second.stderr
    a, b = (ckpt.load_checkpoint(d / "epoch_0.pt") for d in (full, parted))
    assert a["ema"]["updates"] == b["ema"]["updates"] == a["train_state"]["step"] == 6
    for k in a["ema"]["shadow"]:
        torch.testing.assert_close(a["ema"]["shadow"][k], b["ema"]["shadow"][k], rtol=0, atol=1e-6, msg=k)
    assert sum(not torch.allclose(v, a["model"][k]) for k, v in a["ema"]["shadow"].items()
               if v.is_floating_point()) > len(a["model"]) // 2
    assert average_model.main(["--model_dir", str(full), "--mode", "ema", "--dst", str(full / "avg_ema.pt")]) == 0
    written = ckpt.load_checkpoint(full / "avg_ema.pt")
    assert written["ema_of"] == "epoch_0.pt"
    config = load_config(full / "train.yaml")
    model = build_trained_model(config, full / "avg_ema.pt", load_text_inputs(config, model_cmvn=False).vocabulary)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, a["ema"]["shadow"][k].to(v.dtype), msg=k)


def test_average_model_refuses_ema_of_a_run_without_one(tmp_path, capsys):
    ckpt.save_checkpoint(tmp_path / "epoch_0.pt", {"model": {"w": torch.zeros(2)}}, {"epoch": 0, "step": 1})
    assert average_model.main(["--model_dir", str(tmp_path), "--mode", "ema", "--dst", str(tmp_path / "e.pt")]) == 2
    assert "holds no weight EMA: train with ema_decay" in capsys.readouterr().err


def test_only_applied_optimizer_steps_move_the_shadow(tmp_path):
    """A step skipped for a non-finite loss leaves the shadow (and its count) as it was; an
    applied step moves it towards the new weights."""
    from asrkit.models import build_model
    from asrkit.text.vocabulary import Vocabulary
    from asrkit.train.dist import DistContext
    from asrkit.train.executor import Executor, TrainState
    from asrkit.train.scheduler import build_optimizer, build_scheduler
    from tests.helpers import random_batch, tiny_config_dict
    cfg = build(TrainConfig, tiny_config_dict(ema_decay=0.5))
    torch.manual_seed(0)
    model = build_model(cfg, 80, Vocabulary.of_size(10))
    opt = build_optimizer(cfg, model.parameters())
    ema = WeightEma(model, cfg.ema_decay)
    ex = Executor(cfg, model, opt, build_scheduler(cfg, opt), DistContext(), tmp_path, progress=False, ema=ema)
    state, before = TrainState(), {k: v.clone() for k, v in ema.shadow.items()}
    batch = random_batch(torch.Generator().manual_seed(1), 2)
    ex._forward(model, batch, (0, -1))["loss"].backward()
    ex._optimizer_step(2, torch.ones((), dtype=torch.int64), [batch], state)  # one non-finite loss: skipped
    assert ema.updates == 0 and all(torch.equal(before[k], v) for k, v in ema.shadow.items())
    ex._forward(model, batch, (0, -1))["loss"].backward()
    ex._optimizer_step(2, torch.zeros((), dtype=torch.int64), [batch], state)
    assert ema.updates == 1 and state.step == 1
    name = "decoder.embed.0.weight" if "decoder.embed.0.weight" in ema.shadow else next(iter(ema.shadow))
    expected = 0.1 * before[name] + 0.9 * model.state_dict()[name].float()  # d = min(0.5, 1/10)
    torch.testing.assert_close(ema.shadow[name], expected)
