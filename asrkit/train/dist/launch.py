"""Launch: resolving who this process is (torchrun environment, legacy flags or the config's
``launch`` section), joining the process group, wrapping the model in DDP."""
from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist

from asrkit.train.dist.context import DistContext
from asrkit.train.problems import Problem, ProblemKind

log = logging.getLogger("asrkit.train")

# Set by torchrun in every worker: 0 in the first attempt of a job, n after n restarts.
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"

# An init file older than this when a rank starts is from an earlier run (the ranks of
# one job start within seconds of each other; torch deletes the file at a clean exit).
STALE_INIT_FILE_S = 60.0


class LaunchError(RuntimeError):
    """The launch description (torchrun environment, flags, ``launch`` section) is unusable."""


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


def check_init_method(init_method: str) -> None:
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
    (one GPU per process).  Under torchrun (``TORCHELASTIC_RESTART_COUNT`` set) the group's
    keys live under a per-attempt prefix of the rendezvous store, so the ranks of a job
    restarted by ``--max_restarts`` never meet the keys of the attempt before.  Call
    :func:`check_init_method` first (``asrkit.bin.train`` does, before anything else, so a
    bad init method is a one-line error with exit status 2), and :func:`shutdown` in a
    ``finally``.
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
    timeout = datetime.timedelta(seconds=timeout_s)
    kwargs = dict(backend=spec.backend, rank=spec.rank, world_size=spec.world_size, timeout=timeout)
    attempt = os.environ.get(RESTART_COUNT_ENV)
    if spec.init_method == "env://" and attempt is not None:
        # torchrun's static rendezvous serves every attempt of a job from one store, so a
        # restarted job would find the previous attempt's keys -- gloo then reads dead peers'
        # addresses and can wait forever to connect.  Each attempt gets its own key prefix.
        store, _, _ = next(dist.rendezvous("env://", rank=spec.rank, world_size=spec.world_size, timeout=timeout))
        kwargs["store"] = dist.PrefixStore(f"asrkit/attempt_{attempt}/", store)
    elif spec.init_method != "env://":
        kwargs["init_method"] = spec.init_method
    if spec.backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    return ctx


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def check_sync_batchnorm(backend: str, device: torch.device) -> Optional[Problem]:
    """Why ``sync_batchnorm: true`` cannot run here (None when it can): torch's
    SyncBatchNorm needs CUDA tensors and the nccl backend, not CPU/gloo."""
    if device.type != "cuda" or backend != "nccl":
        return Problem(ProblemKind.SETTING,
                       f"sync_batchnorm: true needs CUDA GPUs and the nccl backend (torch.nn.SyncBatchNorm does "
                       f"not run on CPU or with gloo), but this run uses the {backend} backend on {device.type}",
                       "set sync_batchnorm: false")
    return None


def count_batchnorm(model: torch.nn.Module) -> int:
    """Batch-norm layers of ``model`` (what ``sync_batchnorm`` would convert)."""
    return sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def wrap_ddp(model: torch.nn.Module, ctx: DistContext, find_unused_parameters: bool,
             sync_batchnorm: bool = False) -> torch.nn.Module:
    """DistributedDataParallel around ``model`` (returned unchanged for world size 1).

    ``sync_batchnorm``: first convert every BatchNorm layer to ``torch.nn.SyncBatchNorm``
    (statistics over the global batch instead of each rank's); CUDA + nccl only (see
    :func:`check_sync_batchnorm`).  Parameters keep their identity and the state-dict keys
    do not change, so checkpoints stay interchangeable with unsynchronised runs.

    Buffers: DDP broadcasts rank 0's buffers before every forward.  Those outside the state
    dict (``persistent=False``: the positional-encoding tables, constants each rank computes
    itself and may lengthen for a long input) are left out -- for the small conformer they are
    5.76 MB, a third more than its fp32 gradient, sent at every forward (bench/network_cost.py);
    the state dict's buffers (BatchNorm statistics, CMVN) are still broadcast."""
    if not ctx.distributed:
        return model
    if sync_batchnorm:
        problem = check_sync_batchnorm(ctx.backend or "gloo", ctx.device)
        if problem:
            raise LaunchError(str(problem))
        n = count_batchnorm(model)
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        log.info("sync_batchnorm: %d BatchNorm layer(s) converted to SyncBatchNorm", n)
    from torch.nn.parallel import DistributedDataParallel
    in_state = set(model.state_dict())
    constants = [name for name, _ in model.named_buffers() if name not in in_state]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, constants)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids,
                                   find_unused_parameters=find_unused_parameters)


def describe(ctx: DistContext, spec: LaunchSpec) -> str:
    """One start-up line: backend, world, ranks, socket interface variables."""
    nodes = max(1, spec.world_size // max(1, spec.local_world_size))
    ifaces = ", ".join(f"{v}={os.environ[v]}" for v in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
                       if os.environ.get(v)) or "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME unset"
    return (f"launch via {spec.source}: backend {spec.backend}, world size {spec.world_size} "
            f"({nodes} node(s) x {spec.local_world_size}), rank {ctx.rank}, local rank {ctx.local_rank}, "
            f"device {ctx.device}, host {ctx.host}, init {spec.init_method}; {ifaces}")
