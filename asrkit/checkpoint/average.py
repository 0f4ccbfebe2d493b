"""Averaging checkpoints (``average_model``; which ones, :mod:`asrkit.checkpoint.names`)."""
from __future__ import annotations

from pathlib import Path

import torch

from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.checkpoint.weights import resolved_state


def average_state_dicts(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the models in ``paths`` (floating tensors averaged in float64;
    integer buffers such as BatchNorm's ``num_batches_tracked`` taken from the last).  Each
    checkpoint is resolved first (:func:`asrkit.checkpoint.weights.resolved_state`): a fine-tuning
    run's base tensors put back and its LoRA adapters merged, so the mean is that of the
    plain models (the mean of merged weights, not a merge of mean adapters)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    states = (resolved_state(load_checkpoint(p), str(p)) for p in paths)
    dtypes: dict[str, torch.dtype] = {}
    for p, sd in zip(paths, states):
        if total and sd.keys() != total.keys():
            raise CheckpointError(f"{p} holds a different model than {paths[0]}")
        for k, v in sd.items():
            dtypes[k] = v.dtype
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double().clone()
            else:
                total[k] = v.clone()
    return {k: (v / len(paths)).to(dtypes[k]) if dtypes[k].is_floating_point else v
            for k, v in total.items()}
