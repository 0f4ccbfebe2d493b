"""Who this process is in the job (:class:`DistContext`) and the collectives the trainer uses.

With ``world_size == 1`` (no process group) every collective is a no-op that returns its
input, so the single-process trainer runs the same code path as DDP.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from typing import Any, Optional

import torch
import torch.distributed as dist


@dataclasses.dataclass
class DistContext:
    """Who this process is in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    backend: Optional[str] = None
    host: str = dataclasses.field(default_factory=socket.gethostname)
    # What this rank is doing, for the stuck-rank diagnosis: the asrkit.train.dist.monitor.RankMonitor
    # that RankMonitor.for_context attached (None: none) -- the one way the training reaches it.  (Typed
    # Any: the monitor module imports this one.)
    monitor: Optional[Any] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def is_main(self) -> bool:
        """Rank 0: the rank that decides, writes checkpoints and TensorBoard."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 and dist.is_available() and dist.is_initialized()

    # ------------------------------------------------------------------ collectives

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks, in place on a copy moved to the collective's device;
        returns the result on the tensor's original device."""
        if not self.distributed:
            return tensor
        work = tensor.detach().to(self.device).clone()
        dist.all_reduce(work, op=dist.ReduceOp.SUM)
        return work.to(tensor.device)

    def sum_floats(self, values: list[float]) -> list[float]:
        """All-reduce a few Python numbers in one collective (float64)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def decide(self, value: bool) -> bool:
        """Rank 0's ``value``, broadcast: every rank returns the same decision
        (checkpoint now, stop early, ...) so none is left waiting in a collective."""
        if not self.distributed:
            return bool(value)
        t = torch.tensor([1 if value else 0], dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    def all_true(self, value: bool) -> bool:
        """True on every rank iff ``value`` is true on every rank."""
        if not self.distributed:
            return bool(value)
        t = torch.tensor([1 if value else 0], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_gather(self, obj: Any) -> list:
        """Every rank's picklable ``obj``, in rank order, on every rank; ``[obj]`` with one
        process.  A collective: every rank must call it."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def gather_to_main(self, obj: Any) -> Optional[list]:
        """Every rank's picklable ``obj``, in rank order, on rank 0 (None on the others);
        ``[obj]`` with one process.  A collective: every rank must call it."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out


def default_num_threads(local_world_size: int = 1) -> int:
    """Intra-op threads per process: the cores this process may use, shared evenly by the
    processes of this node (torchrun's ``OMP_NUM_THREADS=1`` default is not assumed)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_world_size))


def no_sync_if(model: torch.nn.Module, skip_sync: bool):
    """``model.no_sync()`` when ``skip_sync`` and the model is DDP-wrapped, else a null context."""
    if skip_sync and hasattr(model, "no_sync"):
        return model.no_sync()
    return contextlib.nullcontext()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The bare model inside a DDP wrapper (what checkpoints store)."""
    return getattr(model, "module", model)
