"""The model and optimizer of a checkpoint in the two forms the engines write, and the
conversions that let either engine resume from either form on any world size.

* **Plain** (``torch_ddp``'s, asrkit's checkpoint since the start): ``model`` is the whole
  state dict and ``optimizer`` is ``torch.optim.Optimizer.state_dict()`` -- its per-parameter
  state keyed by the parameter's position in the optimizer's one group.
* **Sharded** (``torch_fsdp``'s): ``model`` is still the whole state dict (the consolidated
  form, gathered on rank 0: what averaging, decoding and export read), the model's and the
  optimizer's tensors are also in the checkpoint's folder of shards
  (``asrkit.checkpoint.sharded``), keyed by parameter name, and ``optimizer`` holds only
  ``param_groups`` (hyper-parameters; parameters by name).

Positions map to names through the bare model's trainable parameters in
``named_parameters()`` order -- the order ``asrkit.train.build`` hands them to the optimizer.
Reading a sharded checkpoint, ``torch.distributed.checkpoint`` re-shards to this run's world
size and engine (DTensor shards under FSDP, whole tensors otherwise).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from asrkit.checkpoint.load import SHARDS, CheckpointError
from asrkit.checkpoint.sharded import read_sharded, write_sharded
from asrkit.train.dist.context import unwrap


def trainable_names(model: nn.Module) -> list[str]:
    """The names of ``model``'s trainable parameters in the optimizer's order."""
    return [name for name, p in unwrap(model).named_parameters() if p.requires_grad]


def by_name(model: nn.Module, plain: dict) -> dict:
    """A plain optimizer state dict (positions) keyed by parameter name instead, as
    ``torch.distributed.checkpoint.state_dict.set_optimizer_state_dict`` takes it."""
    names = trainable_names(model)
    groups = plain["param_groups"]
    if sum(len(g["params"]) for g in groups) != len(names):
        raise CheckpointError(f"the checkpoint's optimizer holds {sum(len(g['params']) for g in groups)} "
                              f"parameters, this model trains {len(names)}")
    return {"state": {names[i]: s for i, s in plain["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in groups]}


def write_sharded_state(model: nn.Module, optimizer: torch.optim.Optimizer, path: Path,
                        is_main: bool) -> dict[str, Any]:
    """Every rank: write ``model``'s and ``optimizer``'s tensors into checkpoint ``path``'s
    folder of shards; returns the checkpoint's entries for them -- on rank 0 the ``optimizer``
    entry (its ``param_groups``) and the shards' record (``SHARDS``), on the others ``{}``."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    optim = get_optimizer_state_dict(model, optimizer)
    record = write_sharded(path, {"model": get_model_state_dict(model), "optimizer": optim["state"]}, is_main)
    if not is_main:
        return {}
    return {"optimizer": {"param_groups": optim["param_groups"]}, SHARDS: record}


def read_sharded_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, path: Path, *,
                       distributed: bool, with_model: bool) -> None:
    """Fill ``optimizer`` (and ``model`` when ``with_model``) from checkpoint ``path``'s
    shards (``state`` its ``.pt``), re-sharded for this run.  ``distributed``: every rank
    reads its own shards together; else each process reads whole tensors alone."""
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)
    target = {"optimizer": get_optimizer_state_dict(model, optimizer)["state"]}
    if with_model:
        target["model"] = get_model_state_dict(model)
    read_sharded(path, state[SHARDS], target, distributed)
    if with_model:
        set_model_state_dict(model, target["model"])
    set_optimizer_state_dict(model, optimizer, {"state": target["optimizer"],
                                                "param_groups": state["optimizer"]["param_groups"]})
