"""Frozen modules (asrkit.finetune.freeze): which parameters train, and frozen BatchNorm
statistics that stay where they were."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig, build
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
