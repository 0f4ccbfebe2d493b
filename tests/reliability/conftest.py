"""Fixtures of the reliability tests: one uninterrupted two-rank run that the killed-rank
and preemption tests compare their final weights with."""
from __future__ import annotations

import pytest

from tests.helpers import run_checked
from tests.reliability.common import torchrun, two_rank_config


@pytest.fixture(scope="session")
def reliability_root(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="session")
def uninterrupted(tiny_experiment, reliability_root):
    """Two ranks under torchrun, 2 epochs of 6 optimizer steps, never interrupted:
    ``(config path, model_dir)``."""
    config = two_rank_config(tiny_experiment, reliability_root / "two_rank.yaml")
    model_dir = reliability_root / "uninterrupted"
    run_checked(torchrun(tiny_experiment, model_dir, config), timeout=240)
    return config, model_dir
