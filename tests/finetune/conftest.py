"""A trained tiny model for the fine-tuning tests to start from."""
from __future__ import annotations

import pytest

from tests.helpers import train_here as train


@pytest.fixture(scope="session")
def base_model(tiny_experiment, tmp_path_factory):
    """A trained tiny model: what the fine-tuning runs start from."""
    root = tmp_path_factory.mktemp("finetune_base")
    cfg = tiny_experiment.config(root / "c.yaml", max_epoch=1,
                                 encoder_conf={"cnn_module_norm": "batch_norm"})
    train(tiny_experiment, root / "exp", cfg)
    return cfg, root / "exp" / "epoch_0.pt"
