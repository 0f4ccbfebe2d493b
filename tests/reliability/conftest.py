"""Fixtures of the reliability tests: one uninterrupted two-rank DDP run that the fault tests
(parametrised by training engine) compare their final weights with."""
from __future__ import annotations

import pytest

from tests.reliability.common import forked_job, two_rank_config


@pytest.fixture(scope="session")
def reliability_root(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="session")
def uninterrupted(tiny_experiment, reliability_root):
    """Two ranks (torch_ddp, forked: ``common.forked_job``), 2 epochs of 6 optimizer steps,
    never interrupted: ``(config path, model_dir)``."""
    config = two_rank_config(tiny_experiment, reliability_root / "two_rank_torch_ddp.yaml")
    model_dir = reliability_root / "uninterrupted_torch_ddp"
    forked_job(tiny_experiment, model_dir, config)
    return config, model_dir


@pytest.fixture(params=["torch_ddp", "torch_fsdp"])
def engine_run(request, tiny_experiment, reliability_root, uninterrupted):
    """``(train_engine, its config, the uninterrupted DDP run's model_dir)``: a fault test
    parametrised by engine.  Its torch_fsdp run is held to the DDP run's weights within
    ``common.assert_engine_weights``'s tolerance (``tests/train/engines/test_fsdp.py`` shows
    FSDP equal to DDP), which saves a second uninterrupted run."""
    engine = request.param
    config = two_rank_config(tiny_experiment, reliability_root / f"two_rank_{engine}.yaml", train_engine=engine)
    return engine, config, uninterrupted[1]
