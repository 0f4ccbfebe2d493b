"""Putting a checkpoint's weights into a model: the one loader that decoding, export,
resuming and ``--enc_init`` (:func:`init_modules`) share.

:func:`model_state` turns what a checkpoint holds into a state dict under the model's
names -- asrkit's own (a DDP ``module.`` prefix dropped) or WeNet's
(:mod:`asrkit.checkpoint.wenet`; less the heads WeNet saves untrained, whose loss weight
is 0 and which asrkit does not build: :func:`without_untrained_heads`) -- and refuses an
asrkit checkpoint written before ``config_version`` 2 whose relative positions the model
would read differently.

A fine-tuning run's checkpoint (``asrkit.finetune``) may hold only what the run changed:
its :data:`BASE_RECORD` names the model file the frozen rest comes from (path, SHA-256 and
the tensors' names), and its LoRA record (``asrkit.models.lora``) the adapters.
:func:`resolved_state` puts the base's tensors back (refusing a base that is missing or
whose bytes changed) and, for a model without adapters, merges them: every reader --
decoding, export, averaging -- gets the plain model; a training run with adapters gets
them unmerged to resume.
:func:`load_weights` then requires the keys to match the model's exactly: one missing or
one extra key, or a tensor of another shape, is a :class:`CheckpointError` naming it.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from torch import nn

import torch

from asrkit.checkpoint.load import CheckpointError, check_keys, load_checkpoint, strip_module_prefix
from asrkit.checkpoint.wenet import from_wenet_state, is_wenet_state
from asrkit.checkpoint.whisper import with_converted_heads
from asrkit.files import file_digest
from asrkit.models.lora import LORA_RECORD, has_lora, merge_lora_state

# the checkpoint entry of a run that stores only what it changed:
# {"path": the base model file (absolute), "sha256": its bytes' digest, "tensors": [names]}
BASE_RECORD = "base"


def positional_type(model: nn.Module) -> Optional[str]:
    """The encoder's ``pos_enc_layer_type`` (None for a model without that encoder)."""
    encoder = getattr(model, "encoder", None)
    return getattr(encoder, "pos_enc_type", None)


def check_positional_version(checkpoint: dict, model: nn.Module, source: str) -> None:
    """:class:`CheckpointError` when ``checkpoint`` was trained by asrkit before
    ``config_version`` 2 (its ``config`` has no ``config_version``), with relative-position
    attention, and ``model`` uses WeNet's ``rel_pos``: the same weights would compute
    something else (their ``rel_pos`` was Transformer-XL's, now ``rel_pos_xl``)."""
    config = checkpoint.get("config")
    if not isinstance(config, dict) or "config_version" in config:
        return
    trained_relative = any(k.endswith("pos_bias_u") for k in checkpoint.get("model", {}))
    if trained_relative and positional_type(model) == "rel_pos":
        raise CheckpointError(f"{source} was trained before config_version 2, when rel_pos meant "
                              f"Transformer-XL positions: set encoder_conf.pos_enc_layer_type: rel_pos_xl "
                              f"to use it")


def without_untrained_heads(state: dict, model: nn.Module) -> dict:
    """``state`` (WeNet's, under asrkit's names) less the keys of the CTC head / attention
    decoder that ``model`` leaves out (its ``ctc`` / ``decoder`` is None: that loss's weight
    is 0).  WeNet builds and saves both heads whatever their weights, and a head whose weight
    is 0 is never trained (e.g. a pure RNN-T transducer's ``ctc.*`` and ``decoder.*``)."""
    absent = tuple(f"{head}." for head in ("ctc", "decoder") if getattr(model, head, "") is None)
    return {k: v for k, v in state.items() if not k.startswith(absent)} if absent else state


def is_wenet_checkpoint(checkpoint: dict, model: nn.Module) -> bool:
    """Whether ``checkpoint`` (as :func:`asrkit.checkpoint.load.load_checkpoint` returns it)
    is WeNet's, for ``model`` (:func:`asrkit.checkpoint.wenet.is_wenet_state` with the
    model's keys: a Whisper model's own tables are not WeNet's sign)."""
    return is_wenet_state(strip_module_prefix(checkpoint["model"]), model.state_dict().keys())


def model_state(checkpoint: dict, model: nn.Module, source: str) -> dict:
    """The state dict of ``checkpoint`` (as :func:`asrkit.checkpoint.load.load_checkpoint`
    returns it) under ``model``'s names (see the module docstring); LoRA adapters merged
    unless ``model`` has adapters itself.  The output of WeNet's Whisper converter gets the
    heads it leaves out (:func:`asrkit.checkpoint.whisper.with_converted_heads`)."""
    state = strip_module_prefix(checkpoint["model"])
    if is_wenet_checkpoint(checkpoint, model):
        state = from_wenet_state(state, source, model.state_dict().keys())
        return with_converted_heads(without_untrained_heads(state, model), model, source)
    check_positional_version(checkpoint, model, source)
    return resolved_state(checkpoint, source, merge_lora=not has_lora(model))


def resolved_state(checkpoint: dict, source: str, *, merge_lora: bool = True) -> dict:
    """The whole state of ``checkpoint`` under the names it was saved with (asrkit's, or
    WeNet's for a WeNet checkpoint, which has no base): the tensors of its
    :data:`BASE_RECORD` put back from the base model file (under asrkit's names, a WeNet
    base mapped), and, with ``merge_lora``, its LoRA adapters folded into their weights
    (:func:`asrkit.models.lora.merge_lora_state`).  :class:`CheckpointError` when the base
    model is missing, changed, or lacks a tensor."""
    state = strip_module_prefix(checkpoint["model"])
    base = checkpoint.get(BASE_RECORD)
    if base:
        state = {**_base_tensors(base, source), **state}
    record = checkpoint.get(LORA_RECORD)
    if record and merge_lora:
        try:
            state = merge_lora_state(state, record)
        except ValueError as e:
            raise CheckpointError(f"{source}: {e}") from None
    return state


def _base_tensors(base: dict, source: str) -> dict:
    path = Path(base["path"])
    names = list(base["tensors"])
    if not path.is_file():
        raise CheckpointError(f"{source} takes {len(names)} unchanged tensors from its base model {path}, which "
                              f"is missing: put it back there (the checkpoint stores only what training changed)")
    stat = path.stat()
    if _digest(str(path), stat.st_mtime_ns, stat.st_size) != base["sha256"]:
        raise CheckpointError(f"{source} takes {len(names)} unchanged tensors from its base model {path}, whose "
                              f"bytes changed since (SHA-256 differs from the {base['sha256'][:12]}... recorded): "
                              f"restore the file the run started from")
    state = resolved_state(load_checkpoint(path), str(path))
    if is_wenet_state(state, names):
        state = from_wenet_state(state, str(path), names)
    missing = [n for n in names if n not in state]
    if missing:
        raise CheckpointError(f"{source}: its base model {path} has no '{missing[0]}'")
    return {n: state[n] for n in names}


@functools.lru_cache(maxsize=16)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    """``file_digest(path)``, once per version of the file (averaging reads one base per
    checkpoint)."""
    return file_digest(path)


def load_weights(model: nn.Module, checkpoint: dict, source: str) -> None:
    """Load every weight of ``checkpoint`` into ``model`` (exact key match, see above)."""
    state = model_state(checkpoint, model, source)
    check_keys(state, model, source)
    model.load_state_dict(state)


def init_modules(model: torch.nn.Module, path: str | Path, prefixes: list[str], *,
                 source: Optional[dict] = None, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy the parameters and buffers whose names start with one of ``prefixes`` (e.g.
    ``["encoder."]``) from the model in checkpoint ``path`` (a training checkpoint or an
    averaged model) into ``model``; everything else keeps its fresh initialisation.
    WeNet's ``--enc_init`` / ``--enc_init_mods``: a BPE model can start from the encoder of
    a char model (or any pretrained encoder of the same architecture).

    Strict about what it does copy: every prefix must match at least one entry of ``model``
    and every such entry must be in the checkpoint with the same shape, else
    :class:`CheckpointError` names the first offending key (a different ``output_size`` or
    ``num_blocks`` is refused, not silently skipped).  A WeNet checkpoint is read with
    WeNet's names mapped (:func:`model_state`).  ``source``: that state,
    when the caller has it already; ``skip``: prefixes within ``prefixes`` left at their
    fresh initialisation (re-initialised output layers).  Returns the copied names.
    """
    prefixes = [p for p in prefixes if p]
    if not prefixes:
        raise CheckpointError("init_modules: no module prefix given (e.g. 'encoder.')")
    if source is None:
        source = model_state(load_checkpoint(path), model, f"init from {path}")
    target = model.state_dict()
    copied: list[str] = []
    for prefix in prefixes:
        names = [k for k in target if k.startswith(prefix)]
        if not names:
            raise CheckpointError(f"init from {path}: the model has no parameter whose name starts with '{prefix}' "
                                  f"(its top-level modules: {sorted({k.split('.')[0] + '.' for k in target})})")
        for name in names:
            if name.startswith(skip):
                continue
            if name not in source:
                raise CheckpointError(f"init from {path}: the checkpoint has no '{name}' (a different "
                                      f"architecture?)")
            if source[name].shape != target[name].shape:
                raise CheckpointError(f"init from {path}: '{name}' is {tuple(source[name].shape)} in the "
                                      f"checkpoint, {tuple(target[name].shape)} in this model")
            target[name] = source[name]  # (load_state_dict copies into the model's dtype)
            copied.append(name)
    model.load_state_dict(target)
    return copied
