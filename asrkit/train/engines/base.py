"""What every training engine offers the trainer (:class:`TrainingEngine`), and what the
engines share: activation checkpointing before wrapping, and the checkpoint entries of a
replicated model.

An engine owns how the model is spread over the ranks: it wraps the bare model
(:meth:`TrainingEngine.wrap`), says whether a micro-batch's backward communicates
(:meth:`TrainingEngine.gradient_sync`), computes the global gradient norm
(:meth:`TrainingEngine.gradient_norm`), and turns the model and optimizer into a
checkpoint's entries and back (:meth:`TrainingEngine.checkpoint_entries`,
:meth:`TrainingEngine.restore`).  The executor and the trainer call only these; no other
module asks which engine runs.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, ContextManager, Optional, Sequence

import torch
from torch import nn

from asrkit.checkpoint.weights import load_weights
from asrkit.train.dist.context import DistContext, unwrap
from asrkit.train.engines.activations import checkpoint_activations
from asrkit.train.grads import gradient_norm

log = logging.getLogger("asrkit.train")


class TrainingEngine:
    """One way of training on several ranks, built for the run's config ``cfg`` and this
    rank's ``ctx``.  ``name`` is the ``train_engine`` value; ``sharded`` says whether each
    rank holds only a shard of the parameters (their ``DTensor`` shards)."""

    name = "?"
    sharded = False

    def __init__(self, cfg, ctx: DistContext):
        self.cfg = cfg
        self.ctx = ctx

    # ------------------------------------------------------------------ building

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` ready to train on every rank: its blocks' activations checkpointed
        (``gradient_checkpointing``), then wrapped by the engine (:meth:`_wrap`)."""
        enc = bool(getattr(self.cfg.encoder_conf, "gradient_checkpointing", False))
        dec = bool(getattr(self.cfg.decoder_conf, "gradient_checkpointing", False))
        if enc or dec:
            n = checkpoint_activations(model, enc, dec)
            log.info("activation checkpointing: %d block(s) (%s) recompute their activations in the backward",
                     n, " and ".join(p for p, on in (("encoder", enc), ("decoder", dec)) if on))
        return self._wrap(model)

    def _wrap(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    # ------------------------------------------------------------------ stepping

    def gradient_sync(self, model: nn.Module, sync: bool) -> ContextManager:
        """The context of one micro-batch's forward and backward: gradients are exchanged
        between the ranks when ``sync`` (the last micro-batch of an accumulation group), else
        accumulated locally."""
        return contextlib.nullcontext()

    def gradient_norm(self, params: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
        """The 2-norm of all gradients of ``params`` on every rank together (a plain 0-dim
        tensor on ``device``, the same on every rank)."""
        return gradient_norm(params, device)

    def after_evaluation(self, model: nn.Module) -> None:
        """After forward passes without a backward (CV): release what they gathered."""

    def step_report(self) -> Optional[str]:
        """What the engine communicated since the last call (for the train log line), or None."""
        return None

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_entries(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                           path: Path) -> Optional[dict[str, Any]]:
        """The checkpoint ``path``'s ``model`` (the whole state dict, under the bare model's
        names) and ``optimizer`` entries, on rank 0 (None on the others).  Every rank calls
        it: an engine may gather, or write its shards beside ``path`` (``CheckpointError``
        when that fails)."""
        if not self.ctx.is_main:
            return None
        return {"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict()}

    def restore(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, path: Path) -> None:
        """Put checkpoint ``state`` (read from ``path``, as ``load_checkpoint`` returns it)
        into ``model`` and ``optimizer`` -- whichever engine wrote it, on whatever world size."""
        raise NotImplementedError

    def load_model(self, model: nn.Module, state: dict, path: Path) -> None:
        """Put the weights of checkpoint ``state`` (any layout ``load_weights`` reads: asrkit's,
        WeNet's) into ``model``."""
        load_weights(unwrap(model), state, str(path))
