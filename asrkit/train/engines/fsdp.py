"""``train_engine: torch_fsdp``: the model sharded over the ranks with torch's FSDP2
(``torch.distributed.fsdp.fully_shard``), as WeNet's ``--train_engine torch_fsdp`` does.

**Units** (``fsdp_sharding_strategy``): ``zero2`` and ``zero3`` shard every encoder and
decoder block as its own unit, then the root (the rest: front end, embeddings, CTC head,
output layer); ``model`` shards the encoder and the decoder as two units, then the root.
Each rank keeps 1/world of every unit's parameters, gradients and optimizer state (their
``DTensor`` shards); a unit's parameters are all-gathered before its forward and, with
``zero3`` (``reshard_after_forward``), freed after it and all-gathered again for its backward;
``zero2`` and ``model`` keep them from the forward to the end of the backward (and so does
the root under every strategy: its backward starts right after its forward).  Gradients are
reduce-scattered (averaged over the ranks, like DDP's all-reduce: the executor's normaliser is
the same) after the backward of each accumulation group's last micro-batch only
(``set_requires_gradient_sync(False)`` on the others: they accumulate unsharded gradients
locally).  ``no_shard`` and a single process train as ``torch_ddp`` (``asrkit.train.engines``).

**Precision** follows ``dtype``: ``bf16`` gathers and computes with bf16 parameters and
reduce-scatters gradients in fp32 (``MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32)``); the sharded parameters, gradients and optimizer state stay fp32.

**Clipping**: the gradient norm is taken over the sharded gradients of every rank together
(``DTensor``'s reduction): the norm of the unsharded gradient, the same on every rank.

**Communication** is counted as it happens (a counting subclass of FSDP's default
all-gather and reduce-scatter on every unit): the train log line gives the all-gathers and
reduce-scatters of the last optimizer step.

``fsdp_cpu_offload`` keeps the shards on the host (``CPUOffloadPolicy``; CUDA only: refused
on a CPU run).  ``fsdp_sync_module_states`` broadcasts rank 0's weights before sharding
(every rank builds the same weights from the seed anyway).  Checkpoints are sharded
(``asrkit.train.engines.state``), with the consolidated model gathered on rank 0
(``asrkit.train.engines.consolidate``)."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from asrkit.checkpoint.load import SHARDS
from asrkit.checkpoint.weights import check_keys, model_state
from asrkit.train.engines.activations import blocks
from asrkit.train.engines.base import TrainingEngine
from asrkit.train.engines.consolidate import full_model_state
from asrkit.train.engines.state import by_name, read_sharded_state, write_sharded_state
from asrkit.train.grads import gradient_norm

log = logging.getLogger("asrkit.train")

PARAM_DTYPES = {"bf16": torch.bfloat16}


def _counting(base, counts: dict, key: str):
    """An instance of FSDP's collective ``base`` that counts its calls in ``counts[key]``."""

    class Counting(base):
        def __call__(self, *args, **kwargs):
            counts[key] += 1
            return super().__call__(*args, **kwargs)

    return Counting()


class FsdpEngine(TrainingEngine):
    """``torch_fsdp`` (module docstring).  ``units``: the modules sharded, root last."""

    name = "torch_fsdp"
    sharded = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.units: list[nn.Module] = []
        self.counts = {"all_gather": 0, "reduce_scatter": 0}
        self.last_step = dict(self.counts)  # the collectives of the last optimizer step
        self._step_start = dict(self.counts)

    def _units(self, model: nn.Module) -> list[nn.Module]:
        if self.cfg.fsdp_sharding_strategy == "model":
            return [m for m in (getattr(model, "encoder", None), getattr(model, "decoder", None)) if m is not None]
        found = blocks(model)
        return [*found["encoder"], *found["decoder"]]

    def _wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import (  # (FSDP's default collectives)
            DefaultAllGather, DefaultReduceScatter)
        if self.cfg.fsdp_sync_module_states:
            self._broadcast_from_rank0(model)
        dtype = PARAM_DTYPES.get(self.cfg.dtype)
        policy = (MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype
                  else MixedPrecisionPolicy())
        offload = CPUOffloadPolicy() if self.cfg.fsdp_cpu_offload else OffloadPolicy()
        zero3 = self.cfg.fsdp_sharding_strategy == "zero3"
        self.units = [*self._units(model), model]
        for unit in self.units:  # (the root, last, is gathered again at once by the backward: never resharded)
            fully_shard(unit, reshard_after_forward=zero3 and unit is not model, mp_policy=policy,
                        offload_policy=offload)
        for unit in self.units:
            unit.set_custom_all_gather(_counting(DefaultAllGather, self.counts, "all_gather"))
            unit.set_custom_reduce_scatter(_counting(DefaultReduceScatter, self.counts, "reduce_scatter"))
        local = sum(p.to_local().numel() for p in model.parameters())
        total = sum(p.numel() for p in model.parameters())
        log.info("train_engine torch_fsdp, fsdp_sharding_strategy %s: %d units (%s), parameters sharded over %d "
                 "ranks: this rank holds %d of %d elements (DTensor shards); mixed precision: %s; cpu offload: %s",
                 self.cfg.fsdp_sharding_strategy, len(self.units),
                 ", ".join([*(n for n in ("encoder", "decoder") if getattr(model, n, None) is not None), "root"])
                 if self.cfg.fsdp_sharding_strategy == "model" else f"{len(self.units) - 1} blocks and the root",
                 self.ctx.world_size, local, total,
                 f"{self.cfg.dtype} parameters, fp32 gradient reduction" if dtype else "none (fp32)",
                 "on" if self.cfg.fsdp_cpu_offload else "off")
        return model

    def _broadcast_from_rank0(self, model: nn.Module) -> None:
        import torch.distributed as dist
        in_state = set(model.state_dict())
        with torch.no_grad():
            for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
                if name in in_state:
                    dist.broadcast(tensor.data, src=0)
        log.info("fsdp_sync_module_states: rank 0's weights broadcast to every rank before sharding")

    @contextlib.contextmanager
    def gradient_sync(self, model: nn.Module, sync: bool) -> Iterator[None]:
        model.set_requires_gradient_sync(sync)
        yield
        if sync:  # (a group's last micro-batch: its step's collectives are done when its backward is)
            self.last_step = {k: n - self._step_start[k] for k, n in self.counts.items()}
            self._step_start = dict(self.counts)

    def after_evaluation(self, model: nn.Module) -> None:
        # (a unit that keeps its parameters gathered after the forward -- zero2, model, the root --
        # waits for a backward to free them; CV makes none)
        for unit in self.units:
            unit.reshard()

    def gradient_norm(self, params: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
        norm = gradient_norm(params, device)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    def step_report(self) -> str:
        return (f"all-gathers {self.last_step['all_gather']}, reduce-scatters {self.last_step['reduce_scatter']} "
                f"in the last step")

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_entries(self, model: nn.Module, optimizer: torch.optim.Optimizer, path: Path):
        self.after_evaluation(model)  # (the registered parameters must be the shards)
        entries = write_sharded_state(model, optimizer, path, self.ctx.is_main)
        full = full_model_state(model, self.ctx.is_main)
        return {"model": full, **entries} if self.ctx.is_main else None

    def restore(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, path: Path) -> None:
        if state.get(SHARDS):
            read_sharded_state(model, optimizer, state, path, distributed=True, with_model=True)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
        self.load_model(model, state, path)
        set_optimizer_state_dict(model, optimizer, by_name(model, state["optimizer"]),
                                 options=StateDictOptions(full_state_dict=True))
        log.info("%s is a plain checkpoint (torch_ddp's): its model and optimizer sharded over %d ranks",
                 path, self.ctx.world_size)

    def load_model(self, model: nn.Module, state: dict, path: Path) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        full = model_state(state, model, str(path))
        check_keys(full, model, str(path))
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True))
