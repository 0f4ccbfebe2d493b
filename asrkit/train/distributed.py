"""The one place for distributed logic: process context, collectives, rank-0 decisions.

With ``world_size == 1`` (no process group) every collective is a no-op that returns its
input, so the single-process trainer runs the same code path as DDP.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import socket
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional

import torch
import torch.distributed as dist

log = logging.getLogger("asrkit.train")

# An init file older than this when a rank starts is from an earlier run (the ranks of
# one job start within seconds of each other; torch deletes the file at a clean exit).
STALE_INIT_FILE_S = 60.0


class LaunchError(RuntimeError):
    """The launch description (torchrun environment, flags, ``launch`` section) is unusable."""


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


# ----------------------------------------------------------------------------- launch


@dataclasses.dataclass
class LaunchSpec:
    """Resolved launch parameters and where each came from."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    init_method: str
    source: str  # "torchrun", "flags" or "config"


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def resolve_backend(name: str) -> str:
    """``auto`` = nccl when CUDA is available, else gloo; nccl without a GPU is an error."""
    if name == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if name == "nccl" and not torch.cuda.is_available():
        raise LaunchError("dist_backend nccl needs CUDA GPUs, and none is visible here "
                          "(use dist_backend: gloo or auto on CPU)")
    if name not in ("gloo", "nccl"):
        raise LaunchError(f"unknown dist_backend {name!r} (expected auto, gloo or nccl)")
    return name


def resolve_launch(launch_conf, rank: Optional[int] = None, world_size: Optional[int] = None,
                   local_rank: Optional[int] = None, init_method: Optional[str] = None,
                   dist_backend: Optional[str] = None) -> LaunchSpec:
    """Who this process is, with precedence **torchrun environment > command-line flags >
    YAML ``launch`` section**.

    * torchrun (and SLURM wrappers around it) export ``RANK``, ``WORLD_SIZE``,
      ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``: then
      ``init_method`` is ``env://`` whatever the flags say.
    * Legacy shell loops (one process per GPU, as older WeNet recipes did) pass
      ``--rank``, ``--world_size``, ``--local_rank`` and ``--init_method`` ``tcp://host:port``,
      ``env://`` or ``file:///shared/path``.
    * Otherwise: a single process (world size 1).
    """
    backend = resolve_backend(dist_backend or launch_conf.dist_backend)
    env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if env_rank is not None and env_world is not None:
        local = _env_int("LOCAL_RANK") or 0
        local_world = _env_int("LOCAL_WORLD_SIZE") or 1
        return LaunchSpec(env_rank, env_world, local, local_world, backend, "env://", "torchrun")
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise LaunchError("--rank and --world_size go together")
        if not 0 <= rank < world_size:
            raise LaunchError(f"--rank {rank} is outside --world_size {world_size}")
        method = init_method or launch_conf.init_method
        local = local_rank if local_rank is not None else rank
        local_world = max(1, torch.cuda.device_count()) if backend == "nccl" else world_size
        return LaunchSpec(rank, world_size, local, local_world, backend, method, "flags")
    return LaunchSpec(0, 1, 0, 1, backend, init_method or launch_conf.init_method, "config")


def check_init_method(init_method: str, rank: int) -> None:
    """Refuse init methods that would hang or silently join a dead job."""
    if init_method.startswith("file://"):
        path = Path(init_method[len("file://"):])
        if path.exists():
            age = time.time() - path.stat().st_mtime
            if age > STALE_INIT_FILE_S:
                raise LaunchError(
                    f"init file {path} already exists and was last modified {age:.0f} s ago: it is left "
                    f"over from an earlier run, and reusing it would hang or mix jobs. Delete it (or use "
                    f"a new path) and start all ranks again.")
        elif not path.parent.is_dir():
            raise LaunchError(f"init file directory {path.parent} does not exist")
    elif init_method.startswith("env://"):
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
        if missing:
            raise LaunchError(f"init_method env:// needs {' and '.join(missing)} in the environment "
                              f"(torchrun sets them; or use tcp://host:port)")
    elif not init_method.startswith("tcp://"):
        raise LaunchError(f"unknown init_method {init_method!r} (expected env://, tcp://host:port or "
                          f"file:///path)")


def init_distributed(spec: LaunchSpec, timeout_s: float = 1800.0) -> DistContext:
    """Join the process group described by ``spec`` (no-op for world size 1).

    On CUDA, ``torch.cuda.set_device(local_rank)`` happens before the group is created
    (one GPU per process).  Call :func:`shutdown` in a ``finally``.
    """
    if torch.cuda.is_available():
        torch.cuda.set_device(spec.local_rank % torch.cuda.device_count())
        device = torch.device("cuda", spec.local_rank % torch.cuda.device_count())
    else:
        device = torch.device("cpu")
    ctx = DistContext(rank=spec.rank, world_size=spec.world_size, local_rank=spec.local_rank,
                      local_world_size=spec.local_world_size, device=device, backend=spec.backend)
    if spec.world_size == 1:
        return ctx
    check_init_method(spec.init_method, spec.rank)
    kwargs = dict(backend=spec.backend, rank=spec.rank, world_size=spec.world_size,
                  timeout=datetime.timedelta(seconds=timeout_s))
    if spec.init_method != "env://":
        kwargs["init_method"] = spec.init_method
    if spec.backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    return ctx


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap_ddp(model: torch.nn.Module, ctx: DistContext, find_unused_parameters: bool) -> torch.nn.Module:
    """DistributedDataParallel around ``model`` (returned unchanged for world size 1)."""
    if not ctx.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids,
                                   find_unused_parameters=find_unused_parameters)


def iterate_together(batches: Iterable, ctx: DistContext) -> Iterator:
    """Yield from ``batches`` while **every** rank still has a batch (safety net).

    Before each batch, ranks all-reduce a has-next flag; if any rank is out of batches
    all stop together instead of the others hanging in the next collective.  With the
    sampler's equal batch counts this never triggers; when it does, it is logged as an
    error (it means batches were lost on the ranks that still had some).
    """
    if not ctx.distributed:
        yield from batches
        return
    it = iter(batches)
    flag = torch.zeros(1, dtype=torch.int64, device=ctx.device)
    while True:
        try:
            batch = next(it)
            has = 1
        except StopIteration:
            batch, has = None, 0
        flag.fill_(has)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if int(flag.item()) == 0:
            if has:
                log.error("rank %d: another rank ran out of batches first; stopping this epoch here "
                          "(the batch counts were unequal -- a sampler bug)", ctx.rank)
            return
        yield batch


def describe(ctx: DistContext, spec: LaunchSpec) -> str:
    """One start-up line: backend, world, ranks, socket interface variables."""
    nodes = max(1, spec.world_size // max(1, spec.local_world_size))
    ifaces = ", ".join(f"{v}={os.environ[v]}" for v in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
                       if os.environ.get(v)) or "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME unset"
    return (f"launch via {spec.source}: backend {spec.backend}, world size {spec.world_size} "
            f"({nodes} node(s) x {spec.local_world_size}), rank {ctx.rank}, local rank {ctx.local_rank}, "
            f"device {ctx.device}, host {ctx.host}, init {spec.init_method}; {ifaces}")
