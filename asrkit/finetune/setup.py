"""Turning a freshly built model into the one a fine-tuning run trains, in a fixed order:

1. ``--enc_init``: the named modules from a trained model (:func:`asrkit.checkpoint.weights.init_modules`),
   after :func:`asrkit.finetune.vocabulary.vocabulary_change` -- a changed vocabulary is
   refused unless ``reinit_output_layers`` leaves the output layers at their fresh
   initialisation (the log says which were re-initialised and what was kept);
2. ``use_lora``: adapters injected (``asrkit.models.lora``), optionally started from
   ``lora_conf.lora_ckpt_path``;
3. ``freeze_modules`` / ``only_optimize_lora`` (``asrkit.finetune.freeze``).

The result, :class:`Adaptation`, says which tensors the run's checkpoints may leave out:
those copied from the ``--enc_init`` file that training cannot change (frozen, and not
modified by ``lora_reinit``).  Checkpoints then name that file by path and SHA-256
(``asrkit.checkpoint.weights.BASE_RECORD``) instead of copying it -- a LoRA run's checkpoints hold
the adapters and little else.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Optional

from torch import nn

from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.checkpoint.weights import BASE_RECORD, init_modules, model_state, resolved_state
from asrkit.files import file_digest
from asrkit.models.lora import LORA_RECORD, LoraPlacementError, inject_lora, is_adapter, lora_record
from asrkit.finetune.freeze import FreezeError, freeze, unchanged_by_training
from asrkit.finetune.vocabulary import vocabulary_change, vocabulary_prefixes

log = logging.getLogger("asrkit.train")


class AdaptError(RuntimeError):
    """The fine-tuning set-up cannot be applied (a changed vocabulary, an --enc_init that
    does not fit, a LoRA or freeze placement the model lacks); one line."""


@dataclasses.dataclass(frozen=True)
class Adaptation:
    """What :func:`adapt` did: ``base`` is the checkpoints' :data:`BASE_RECORD` (None: they
    hold every tensor), ``lora`` the LoRA record (None: no adapters)."""

    base: Optional[dict] = None
    lora: Optional[dict] = None

    def checkpoint_entries(self, state: dict) -> dict:
        """The ``model`` entry (``state`` less the base's tensors) and the records a
        checkpoint of this run holds."""
        left_out = set(self.base["tensors"]) if self.base else set()
        out = {"model": {k: v for k, v in state.items() if k not in left_out}}
        if self.base:
            out[BASE_RECORD] = self.base
        if self.lora:
            out[LORA_RECORD] = self.lora
        return out


def _initialise(model: nn.Module, cfg, init) -> list[str]:
    """Step 1 of the module docstring; the copied names."""
    try:
        checkpoint = load_checkpoint(init.checkpoint)
        source = model_state(checkpoint, model, f"init from {init.checkpoint}")
    except CheckpointError as e:
        raise AdaptError(f"cannot initialise from --enc_init: {e}") from e
    outputs = tuple(vocabulary_prefixes(model))
    taken = [p for p in init.prefix_list() if p]
    reaches_outputs = any(o.startswith(p) or p.startswith(o) for o in outputs for p in taken)
    skip: tuple[str, ...] = ()
    if reaches_outputs and cfg.reinit_output_layers:
        skip = outputs
    elif reaches_outputs:
        change = vocabulary_change(checkpoint, init.checkpoint, cfg, model, source)
        if change:
            raise AdaptError(change)
    try:
        copied = init_modules(model, init.checkpoint, taken, source=source, skip=skip)
    except CheckpointError as e:
        raise AdaptError(f"cannot initialise from --enc_init: {e}") from e
    log.info("initialised %d tensors (%s) from %s", len(copied), init.prefixes, init.checkpoint)
    if skip:
        log.info("reinit_output_layers: %s start afresh (initialised from seed %d); everything else of %s "
                 "was taken from %s", ", ".join(p.rstrip(".") for p in skip), cfg.seed, init.prefixes,
                 init.checkpoint)
    return copied


def _load_adapters(model: nn.Module, path: str) -> int:
    """Put the adapters of LoRA checkpoint ``path`` into ``model``'s; how many tensors."""
    try:
        state = resolved_state(load_checkpoint(path), path, merge_lora=False)
    except CheckpointError as e:
        raise AdaptError(f"lora_conf.lora_ckpt_path: {e}") from e
    own = {k: v for k, v in model.state_dict().items() if is_adapter(k)}
    missing = [k for k in own if k not in state]
    if missing:
        raise AdaptError(f"lora_conf.lora_ckpt_path: {path} has no adapter '{missing[0]}' (trained with another "
                         f"lora_conf?)")
    for k, v in own.items():
        if state[k].shape != v.shape:
            raise AdaptError(f"lora_conf.lora_ckpt_path: '{k}' is {tuple(state[k].shape)} in {path}, "
                             f"{tuple(v.shape)} here (another lora_rank?)")
    model.load_state_dict({**model.state_dict(), **{k: state[k] for k in own}})
    return len(own)


def adapt(model: nn.Module, cfg, init=None) -> Adaptation:
    """Apply ``--enc_init`` (``init``: an ``asrkit.train.job.ModuleInit`` or None), LoRA
    and freezing of ``cfg`` to ``model``, in the module docstring's order.
    :class:`AdaptError` (one line) when one of them does not fit the model."""
    copied = _initialise(model, cfg, init) if init else []
    modified: set[str] = set()
    record = None
    if cfg.use_lora:
        try:
            layers = inject_lora(model, cfg.lora_conf, seed=cfg.seed)
        except LoraPlacementError as e:
            raise AdaptError(str(e)) from None
        record = lora_record(model)
        if cfg.lora_conf.lora_reinit:
            modified = {f"{layer}.weight" for layer in layers}
        log.info("LoRA: rank %d, alpha %g on %d linear layers (%s of %s in %s)%s", cfg.lora_conf.lora_rank,
                 cfg.lora_conf.lora_alpha, len(layers), ",".join(cfg.lora_conf.lora_list),
                 ",".join(cfg.lora_conf.lora_attn_attr), ",".join(cfg.lora_conf.lora_modules),
                 "; adapters re-initialised (lora_reinit), their weights offset to match" if modified else "")
        if cfg.lora_conf.lora_ckpt_path:
            n = _load_adapters(model, cfg.lora_conf.lora_ckpt_path)
            log.info("LoRA: %d adapter tensors taken from %s", n, cfg.lora_conf.lora_ckpt_path)
    try:
        report = freeze(model, cfg.freeze_modules, cfg.only_optimize_lora)
    except FreezeError as e:
        raise AdaptError(str(e)) from None
    log.info(report.line())
    base = None
    if copied and report.frozen:
        unchanged = unchanged_by_training(model, [n for n in copied if n not in modified], report.frozen_batchnorms)
        if unchanged:
            path = Path(init.checkpoint).resolve()
            base = {"path": str(path), "sha256": file_digest(path), "tensors": unchanged}
            log.info("checkpoints store what training changes; %d unchanged tensors are read from %s "
                     "(SHA-256 %s...)", len(unchanged), path, base["sha256"][:12])
    return Adaptation(base=base, lora=record)
