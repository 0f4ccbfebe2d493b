"""Frozen modules: parameters that a fine-tuning run does not train.

:func:`freeze` sets ``requires_grad = False`` on every parameter whose name starts with
one of ``freeze_modules`` (WeNet's ``--freeze_modules``, here name prefixes), or, with
``only_optimize_lora``, on every parameter but the LoRA adapters.  What follows from that:
the optimizer is built over the trainable parameters only (no state for frozen ones,
``asrkit.train.build``), DDP leaves parameters without gradients out of its buckets (no
all-reduce), and backward computes no gradient for them.

BatchNorm inside a frozen module (a conformer's ``cnn_module_norm: batch_norm``) would
still update its running statistics in training mode, which are weights too: each such
layer gets a forward pre-hook that puts it in eval mode before every forward, so it
normalises with its running statistics and never updates them, whatever ``model.train()``
did before.  Dropout in frozen modules stays as configured (WeNet's behaviour).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from asrkit.models.lora import is_adapter


class FreezeError(ValueError):
    """``freeze_modules`` names a prefix no parameter of the model has."""


@dataclasses.dataclass(frozen=True)
class FreezeReport:
    """What :func:`freeze` did: parameter counts (elements) and the frozen BatchNorm layers."""

    trainable: int
    frozen: int
    adapters: int
    frozen_batchnorms: tuple[str, ...]
    frozen_modules: tuple[str, ...]
    unused: int = 0  # held untrained by the model itself (see :func:`freeze`)

    def line(self) -> str:
        total = self.trainable + self.frozen + self.unused
        share = 100.0 * self.trainable / total if total else 0.0
        what = []
        if self.unused:
            what.append(f"{self.unused:,} unused by this configuration, kept for WeNet's checkpoint layout")
        if self.frozen_modules:
            what.append(f"frozen: {', '.join(self.frozen_modules)}")
        if self.adapters:
            what.append(f"LoRA adapters {self.adapters:,}")
        if self.frozen_batchnorms:
            what.append(f"{len(self.frozen_batchnorms)} BatchNorm layer(s) kept in eval mode")
        return (f"trainable parameters: {self.trainable:,} of {total:,} ({share:.1f} %), frozen {self.frozen:,}"
                + (f"; {'; '.join(what)}" if what else ""))


def _keep_eval(module: nn.Module, _inputs) -> None:
    module.training = False


def is_frozen_name(name: str, prefixes: Sequence[str], only_lora: bool) -> bool:
    """Whether parameter ``name`` is frozen under ``freeze_modules`` ``prefixes`` and
    ``only_optimize_lora`` ``only_lora``."""
    return (only_lora and not is_adapter(name)) or any(name.startswith(p) for p in prefixes)


def freeze(model: nn.Module, prefixes: Sequence[str], only_lora: bool = False) -> FreezeReport:
    """Freeze ``model``'s parameters as the module docstring says; :class:`FreezeError`
    for a prefix that matches no parameter (a typo would otherwise train everything).

    A parameter that already has ``requires_grad = False`` when ``model`` comes here was
    frozen by the model itself: a weight that WeNet's layout holds but this configuration
    never reads (a Branchformer block's pooling projections outside ``merge_method:
    learned_ave``, an Efficient Conformer block's unused ``concat_linear``).  It stays frozen
    -- DDP would otherwise wait for its gradient and fail -- and is counted as ``unused``.
    ``model`` is a freshly built one: this is its only call."""
    names = list(model.state_dict())  # (a prefix of buffers only, e.g. cmvn., is frozen anyway)
    unmatched = [p for p in prefixes if not any(n.startswith(p) for n in names)]
    if unmatched:
        tops = sorted({n.split(".")[0] + "." for n in names})
        raise FreezeError(f"freeze_modules: no parameter or buffer name starts with {unmatched[0]!r} (the model's "
                          f"top-level modules: {', '.join(tops)}; e.g. encoder., decoder., ctc.)")
    trainable = frozen = adapters = unused = 0
    held = {id(p) for p in model.parameters() if not p.requires_grad}
    for name, param in model.named_parameters():
        if id(param) in held:
            unused += param.numel()
            continue
        is_frozen = is_frozen_name(name, prefixes, only_lora)
        param.requires_grad_(not is_frozen)
        if is_frozen:
            frozen += param.numel()
        else:
            trainable += param.numel()
            adapters += param.numel() if is_adapter(name) else 0
    if not trainable:
        raise FreezeError(f"freeze_modules {list(prefixes)}{' with only_optimize_lora' if only_lora else ''} "
                          f"freezes every parameter: nothing is left to train")
    batchnorms = []
    for name, module in model.named_modules():
        own = list(module.named_parameters(prefix=name, recurse=False))
        if isinstance(module, _BatchNorm) and own and all(not p.requires_grad for _, p in own):
            module.register_forward_pre_hook(_keep_eval)
            batchnorms.append(name)
    shown = ("everything but the LoRA adapters",) if only_lora else tuple(prefixes)
    return FreezeReport(trainable, frozen, adapters, tuple(batchnorms), shown, unused)


def unchanged_by_training(model: nn.Module, names: Sequence[str], frozen_batchnorms: Sequence[str]) -> list[str]:
    """Those of ``names`` (entries of ``model.state_dict()``) that training leaves as they
    started: frozen parameters, buffers of frozen BatchNorm layers, and buffers no optimizer
    or BatchNorm update touches (CMVN statistics).  (A running statistic of a trainable
    BatchNorm changes.)"""
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    frozen_norms = set(frozen_batchnorms)

    def unchanged(name: str) -> bool:
        if name in params:
            return not params[name].requires_grad
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        return not isinstance(modules[owner], _BatchNorm) or owner in frozen_norms
    return [name for name in names if unchanged(name)]
