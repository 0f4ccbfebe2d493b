"""Putting a checkpoint's weights into a model: the one loader that decoding, export,
resuming and ``--enc_init`` share.

:func:`model_state` turns what a checkpoint holds into a state dict under the model's
names -- asrkit's own (a DDP ``module.`` prefix dropped) or WeNet's
(:mod:`asrkit.models.wenet_state`; less the heads WeNet saves untrained, whose loss weight
is 0 and which asrkit does not build: :func:`without_untrained_heads`) -- and refuses an
asrkit checkpoint written before ``config_version`` 2 whose relative positions the model
would read differently.
:func:`load_weights` then requires the keys to match the model's exactly: one missing or
one extra key, or a tensor of another shape, is a :class:`CheckpointError` naming it.
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from asrkit.io.checkpoint import CheckpointError, strip_module_prefix
from asrkit.models.wenet_state import from_wenet_state, is_wenet_state


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


def model_state(checkpoint: dict, model: nn.Module, source: str) -> dict:
    """The state dict of ``checkpoint`` (as :func:`asrkit.io.checkpoint.load_checkpoint`
    returns it) under ``model``'s names (see the module docstring)."""
    state = strip_module_prefix(checkpoint["model"])
    if is_wenet_state(state):
        return without_untrained_heads(from_wenet_state(state, source), model)
    check_positional_version(checkpoint, model, source)
    return state


def _names(keys) -> str:
    keys = sorted(keys)
    return ", ".join(f"'{k}'" for k in keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def check_keys(state: dict, model: nn.Module, source: str) -> None:
    """:class:`CheckpointError` naming the first missing or extra keys, or a key whose
    shape differs, between ``state`` and ``model.state_dict()``."""
    target = model.state_dict()
    missing = target.keys() - state.keys()
    extra = state.keys() - target.keys()
    if missing or extra:
        parts = ([f"missing {_names(missing)}"] if missing else []) + ([f"extra {_names(extra)}"] if extra else [])
        raise CheckpointError(f"{source} does not match the config's model: {'; '.join(parts)}")
    for name, tensor in target.items():
        if state[name].shape != tensor.shape:
            raise CheckpointError(f"{source} does not match the config's model: '{name}' is "
                                  f"{tuple(state[name].shape)} in the checkpoint, {tuple(tensor.shape)} "
                                  f"in the model")


def load_weights(model: nn.Module, checkpoint: dict, source: str) -> None:
    """Load every weight of ``checkpoint`` into ``model`` (exact key match, see above)."""
    state = model_state(checkpoint, model, source)
    check_keys(state, model, source)
    model.load_state_dict(state)
