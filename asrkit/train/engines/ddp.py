"""``train_engine: torch_ddp``: every rank holds the whole model, its gradients and the
optimizer state; DDP all-reduces the gradients in the backward of each group's last
micro-batch (``no_sync`` on the others), with the communication hook of ``ddp_conf``.  One
process trains the bare model.  Its checkpoints are plain (``asrkit.train.engines.state``);
it resumes from a sharded one too (an FSDP run's), reading the optimizer's shards whole."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import ContextManager

import torch
from torch import nn

from asrkit.checkpoint.load import SHARDS
from asrkit.checkpoint.weights import load_weights
from asrkit.train.dist.comm_hooks import describe as describe_comm_hook
from asrkit.train.dist.comm_hooks import register_comm_hook
from asrkit.train.dist.context import no_sync_if, unwrap
from asrkit.train.dist.launch import wrap_ddp
from asrkit.train.engines.base import TrainingEngine
from asrkit.train.engines.state import read_sharded_state

log = logging.getLogger("asrkit.train")


class DdpEngine(TrainingEngine):
    """``torch_ddp`` (module docstring).  ``comm_hook``: the hook registered by :meth:`wrap`
    (``asrkit.train.dist.comm_hooks.CommHook``; None with one process)."""

    name = "torch_ddp"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.comm_hook = None

    def _wrap(self, model: nn.Module) -> nn.Module:
        # Every parameter of the models built here takes part in the loss (AsrModel leaves out
        # the CTC head or the decoder whose weight is 0), so DDP need not search for unused ones.
        wrapped = wrap_ddp(model, self.ctx, find_unused_parameters=False, sync_batchnorm=self.cfg.sync_batchnorm)
        if wrapped is not model:
            self.comm_hook = register_comm_hook(wrapped, self.cfg.ddp_conf, self.cfg.seed)
        log.info(describe_comm_hook(self.cfg.ddp_conf, self.ctx.world_size if self.comm_hook is not None else 1))
        return wrapped

    def gradient_sync(self, model: nn.Module, sync: bool) -> ContextManager:
        return no_sync_if(model, skip_sync=not sync)

    def restore(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, path: Path) -> None:
        load_weights(unwrap(model), state, str(path))
        if state.get(SHARDS):  # an FSDP run's: every rank reads the whole optimizer state alone
            read_sharded_state(unwrap(model), optimizer, state, path, distributed=False, with_model=False)
            log.info("%s was written by torch_fsdp: its optimizer state read whole from its shards", path)
        else:
            optimizer.load_state_dict(state["optimizer"])
