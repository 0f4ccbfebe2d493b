"""Frozen modules (asrkit.finetune.freeze): which parameters train, and frozen BatchNorm
statistics that stay where they were."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.finetune.freeze import FreezeError, freeze
from asrkit.models import build_model
from asrkit.text.vocabulary import Vocabulary
from tests.helpers import tiny_config_dict


def small_model(**encoder):
    """A tiny conformer + attention decoder (BatchNorm in its convolution modules)."""
    raw = tiny_config_dict(encoder_conf={"output_size": 16, "attention_heads": 2, "linear_units": 32,
                                         "num_blocks": 2, "cnn_module_norm": "batch_norm", **encoder},
                           decoder_conf={"attention_heads": 2, "linear_units": 32, "num_blocks": 1})
    cfg = build(TrainConfig, raw)
    torch.manual_seed(0)
    return build_model(cfg, 40, Vocabulary.of_size(12))


def test_frozen_parameters_train_not_and_frozen_batchnorm_keeps_its_statistics():
    model = small_model()
    report = freeze(model, ["encoder."])
    assert all(not p.requires_grad for n, p in model.named_parameters() if n.startswith("encoder."))
    assert all(p.requires_grad for n, p in model.named_parameters() if not n.startswith("encoder."))
    assert report.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad) > 0
    assert len(report.frozen_batchnorms) == 2 and "trainable parameters:" in report.line()
    norm = model.get_submodule(report.frozen_batchnorms[0])
    before = norm.running_mean.clone()
    model.train()
    model.encoder(torch.randn(2, 40, 40) * 3 + 1, torch.tensor([40, 30]))
    assert norm.training is False and torch.equal(norm.running_mean, before)
    thawed = small_model()
    freeze(thawed, ["decoder."])
    thawed.train()
    thawed.encoder(torch.randn(2, 40, 40) * 3 + 1, torch.tensor([40, 30]))
    assert not torch.equal(thawed.get_submodule(report.frozen_batchnorms[0]).running_mean, before)


def test_a_prefix_that_matches_nothing_or_freezes_everything_is_refused():
    with pytest.raises(FreezeError, match="no parameter or buffer name starts with 'encoders.'"):
        freeze(small_model(), ["encoders."])
    with pytest.raises(FreezeError, match="nothing is left to train"):
        freeze(small_model(), ["encoder.", "decoder.", "ctc."])


def test_the_fine_tuning_flags_are_real_booleans_and_set_the_config_keys():
    """``--use_lora false`` is false (WeNet's ``type=bool`` makes it true); each flag becomes
    the override of its config key."""
    from asrkit.bin.train import build_parser, job_from_args
    base = ["--config", "c.yaml", "--train_data", "t.list", "--cv_data", "d.list", "--model_dir", "exp"]
    job = job_from_args(build_parser().parse_args([*base, "--use_lora", "false", "--only_optimize_lora",
                                                   "--lora_rank", "4", "--freeze_modules", "encoder.,ctc."]))
    assert job.overrides == ('freeze_modules=["encoder.", "ctc."]', "use_lora=false", "only_optimize_lora=true",
                             "lora_conf.lora_rank=4")
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--use_lora", "False!"])
