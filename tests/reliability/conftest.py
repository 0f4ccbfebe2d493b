"""Fixtures of the reliability tests: one uninterrupted two-rank run per training engine that
the killed-rank and preemption tests (parametrised by engine) compare their final weights with."""
from __future__ import annotations

import pytest

from tests.helpers import run_checked
from tests.reliability.common import torchrun, two_rank_config


@pytest.fixture(scope="session")
def reliability_root(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


def _uninterrupted(exp, root, engine: str):
    config = two_rank_config(exp, root / f"two_rank_{engine}.yaml", train_engine=engine)
    model_dir = root / f"uninterrupted_{engine}"
    run_checked(torchrun(exp, model_dir, config), timeout=240)
    return config, model_dir


@pytest.fixture(scope="session")
def uninterrupted(tiny_experiment, reliability_root):
    """Two ranks under torchrun (torch_ddp), 2 epochs of 6 optimizer steps, never interrupted:
    ``(config path, model_dir)``."""
    return _uninterrupted(tiny_experiment, reliability_root, "torch_ddp")


@pytest.fixture(scope="session")
def uninterrupted_fsdp(tiny_experiment, reliability_root):
    """The same with ``train_engine: torch_fsdp`` (zero2)."""
    return _uninterrupted(tiny_experiment, reliability_root, "torch_fsdp")


@pytest.fixture(params=["torch_ddp", "torch_fsdp"])
def engine_run(request):
    """``(train_engine, its uninterrupted run)``: a fault test parametrised by engine."""
    name = {"torch_ddp": "uninterrupted", "torch_fsdp": "uninterrupted_fsdp"}[request.param]
    return request.param, request.getfixturevalue(name)
