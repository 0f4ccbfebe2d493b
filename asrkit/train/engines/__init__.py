"""Training engines: how the model is spread over the ranks, one registry entry each
(WeNet's ``train_engine`` names).

* :mod:`~asrkit.train.engines.ddp` -- ``torch_ddp``: the model replicated, gradients all-reduced;
* :mod:`~asrkit.train.engines.fsdp` -- ``torch_fsdp``: the model sharded (FSDP2), gradients
  reduce-scattered, sharded checkpoints;
* :mod:`~asrkit.train.engines.base` -- what an engine offers the executor and the trainer;
* :mod:`~asrkit.train.engines.state` -- a checkpoint's model and optimizer in either engine's
  form, and the conversions between them (any engine resumes from any, on any world size);
* :mod:`~asrkit.train.engines.activations` -- activation checkpointing per block, for every engine;
* :mod:`~asrkit.train.engines.problems` -- what an engine cannot run with (preflight).

:data:`ENGINES` is the registry: a new engine is a :class:`~asrkit.train.engines.base.TrainingEngine`
subclass in its own module and one line here.  :func:`build_engine` is the one place that
chooses (``asrkit.train.build`` calls it).
"""
from __future__ import annotations

import logging

from asrkit.train.dist.context import DistContext
from asrkit.train.engines.base import TrainingEngine
from asrkit.train.engines.ddp import DdpEngine
from asrkit.train.engines.fsdp import FsdpEngine

log = logging.getLogger("asrkit.train")

ENGINES: dict[str, type[TrainingEngine]] = {
    DdpEngine.name: DdpEngine,
    FsdpEngine.name: FsdpEngine,
}


def build_engine(cfg, ctx: DistContext) -> TrainingEngine:
    """The engine of ``cfg.train_engine`` for this rank.  ``torch_fsdp`` with
    ``fsdp_sharding_strategy: no_shard`` (WeNet's flag value), or on a single process (nothing
    to shard), is ``torch_ddp`` -- logged."""
    name = cfg.train_engine
    if name == FsdpEngine.name and (cfg.fsdp_sharding_strategy == "no_shard" or not ctx.distributed):
        why = ("fsdp_sharding_strategy no_shard" if cfg.fsdp_sharding_strategy == "no_shard"
               else "one process, nothing to shard")
        log.info("train_engine torch_fsdp with %s: training as torch_ddp (the model replicated%s)", why,
                 ", gradients all-reduced" if ctx.distributed else "")
        name = DdpEngine.name
    return ENGINES[name](cfg, ctx)


__all__ = ["ENGINES", "DdpEngine", "FsdpEngine", "TrainingEngine", "build_engine"]
