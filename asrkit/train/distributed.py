"""The one place for distributed logic: process context, collectives, rank-0 decisions.

With ``world_size == 1`` (no process group) every collective is a no-op that returns its
input, so the single-process trainer runs the same code path as DDP.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import math
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist

log = logging.getLogger("asrkit.train")

# Set by torchrun in every worker: 0 in the first attempt of a job, n after n restarts.
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"

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
    # What this rank is doing, for the stuck-rank diagnosis (see RankMonitor); optional.
    monitor: Optional["RankMonitor"] = dataclasses.field(default=None, repr=False, compare=False)

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


def check_sync_batchnorm(backend: str, device: torch.device) -> Optional[str]:
    """Why ``sync_batchnorm: true`` cannot run here (None when it can): torch's
    SyncBatchNorm needs CUDA tensors and the nccl backend, not CPU/gloo."""
    if device.type != "cuda" or backend != "nccl":
        return (f"sync_batchnorm: true needs CUDA GPUs and the nccl backend (torch.nn.SyncBatchNorm does "
                f"not run on CPU or with gloo), but this run uses the {backend} backend on {device.type} "
                f"-- set sync_batchnorm: false")
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
    do not change, so checkpoints stay interchangeable with unsynchronised runs."""
    if not ctx.distributed:
        return model
    if sync_batchnorm:
        problem = check_sync_batchnorm(ctx.backend or "gloo", ctx.device)
        if problem:
            raise LaunchError(problem)
        n = count_batchnorm(model)
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        log.info("sync_batchnorm: %d BatchNorm layer(s) converted to SyncBatchNorm", n)
    from torch.nn.parallel import DistributedDataParallel
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


# ----------------------------------------------------------------------------- world-size scaling


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def scale_accum_grad(accum_grad: int, world_size: int, reference_world_size: int,
                     keep_global_batch: bool) -> tuple[int, Optional[str], bool]:
    """``accum_grad`` for this world size: ``(accum_grad to use, what was done, inexact)``.

    The reference run (``reference_world_size`` ranks, ``accum_grad``) sums
    ``reference_world_size x accum_grad`` per-rank batches into one optimizer step.  With
    ``keep_global_batch`` the run keeps that number:
    ``round(reference_world_size x accum_grad / world_size)`` -- to the nearest integer, halves
    rounded up, at least 1.  When that is not exact the message says which global batch the
    run really has (``inexact`` is then True; the caller logs it as a warning).
    Without ``keep_global_batch`` nothing changes; with a ``reference_world_size`` the message
    only compares the global batch with the reference's.
    """
    if reference_world_size <= 0:
        return accum_grad, None, False
    ref_groups = reference_world_size * accum_grad
    if not keep_global_batch:
        if world_size == reference_world_size:
            return accum_grad, (f"world size {world_size} = reference_world_size: the global batch is the "
                                f"reference's"), False
        ratio = world_size / reference_world_size
        return accum_grad, (
            f"world size {world_size} vs reference_world_size {reference_world_size}: the global batch is "
            f"{ratio:.3g}x the reference's (keep_global_batch: false); set keep_global_batch: true to scale "
            f"accum_grad, or scale lr/warmup_steps by hand"), True
    exact = ref_groups / world_size
    effective = max(1, round_half_up(exact))
    head = (f"keep_global_batch: the reference ({reference_world_size} rank(s) x accum_grad {accum_grad}) sums "
            f"{ref_groups} per-rank batches per optimizer step; on {world_size} rank(s) accum_grad "
            f"{accum_grad} -> {effective}")
    got = effective * world_size
    if got == ref_groups:
        return effective, head + ": the same global batch", False
    return effective, (
        f"{head}: {ref_groups}/{world_size} = {exact:.3g} is not an integer and was rounded to the nearest "
        f"(halves up, at least 1), so the global batch is {got} per-rank batches instead of {ref_groups} "
        f"({got / ref_groups:.3g}x the reference); choose a world size that divides {ref_groups}, or scale "
        f"lr/warmup_steps for the rest"), True


# ----------------------------------------------------------------------------- no silent hang
#
# Every rank keeps a *phase* -- what it is doing right now ("waiting for train batch 3/40
# of epoch 0 from the data loader", "in the has-next all-reduce before ...", "training
# on batch ...") -- and a heartbeat thread publishes it to the process group's store
# every few seconds.  When a collective fails or times out (``launch.timeout_s``, passed to
# ``init_process_group``), the failing rank reads the others' phases and names them; a
# rank that waits for its data loader longer than the timeout ends itself (a watchdog
# thread), so a job started without torchrun's agent ends too.

EXIT_STALLED = 3                             # exit status of a rank ended by the watchdog
_STATUS_KEY = "asrkit/rank_status/{}"


def default_store():
    """The default process group's key-value store (None without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        from torch.distributed import distributed_c10d
        return distributed_c10d._get_default_store()
    except Exception:  # pragma: no cover - private API moved
        return None


def is_collective_failure(exc: BaseException) -> bool:
    """Did ``exc`` come out of a collective (timeout, a peer gone, a backend error)?"""
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    # gloo raises plain RuntimeErrors whose text names its source file ("[.../gloo/transport/
    # tcp/unbound_buffer.cc:78] Timed out waiting ...", "... Connection closed by peer").
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(s in text for s in ("gloo", "NCCL", "ProcessGroup", "c10d"))


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return re.sub(r"^\[[^\]]*\]\s*", "", text)  # drop gloo's "[/path/file.cc:78] " prefix


@dataclasses.dataclass(frozen=True)
class Phase:
    text: str      # reads after "while": "waiting for train batch 3/40 of epoch 0 from the data loader"
    kind: str      # "data" (waiting for the loader), "collective", "compute" or "other"
    since: float   # time.monotonic() when it began


class RankMonitor:
    """This rank's phase, its heartbeat in the store, and the data-loader watchdog.

    * :meth:`set_phase` is a local assignment (no I/O): call it as often as you like.
    * A publisher thread writes ``{rank, host, pid, phase, kind, elapsed_s, beat, state}`` to
      the store every ``interval_s`` (``timeout_s / 10``, between 0.5 and 30 s).
    * A watchdog thread ends the process (status :data:`EXIT_STALLED`) when the phase is a
      wait for the data loader that has lasted longer than ``timeout_s``, after logging and
      printing which rank, host and batch it was.
    * :meth:`explain` turns a failed collective into a message naming this rank's phase and
      every other rank's last published phase.
    """

    def __init__(self, ctx: DistContext, timeout_s: float, store=None, *,
                 interval_s: Optional[float] = None):
        self.rank, self.world_size, self.host = ctx.rank, ctx.world_size, ctx.host
        self.timeout_s = float(timeout_s)
        self.store = store
        self.interval_s = interval_s or min(max(self.timeout_s / 10.0, 0.5), 30.0)
        self._phase = Phase("starting", "other", time.monotonic())
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._store_ok = store is not None

    @classmethod
    def for_context(cls, ctx: DistContext, timeout_s: float) -> "RankMonitor":
        """A monitor publishing to the default group's store (when there is one), attached
        to ``ctx`` (``ctx.monitor``) and started."""
        monitor = cls(ctx, timeout_s, default_store() if ctx.distributed else None)
        ctx.monitor = monitor
        monitor.start()
        return monitor

    # ------------------------------------------------------------------ phase

    @property
    def phase(self) -> Phase:
        return self._phase

    def set_phase(self, text: str, kind: str = "other") -> None:
        self._phase = Phase(text, kind, time.monotonic())

    # ------------------------------------------------------------------ threads

    def start(self) -> None:
        targets = [self._watch] + ([self._beat] if self.store is not None else [])
        for fn in targets:
            t = threading.Thread(target=fn, name=f"asrkit-{fn.__name__.strip('_')}-rank{self.rank}", daemon=True)
            t.start()
            self._threads.append(t)
        self._publish()

    def stop(self, state: str = "finished") -> None:
        """Stop the threads and publish a last status (``finished`` or ``failed``)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2.0)
        self._threads.clear()
        self._publish_bounded(state)

    def _publish_bounded(self, state: str, wait_s: float = 2.0) -> None:
        """Publish from a helper thread, waiting at most ``wait_s``: an unreachable store must
        not delay a failing process."""
        t = threading.Thread(target=self._publish, args=(state,), daemon=True)
        t.start()
        t.join(timeout=wait_s)

    def _record(self, state: str) -> str:
        p = self._phase
        return json.dumps({"rank": self.rank, "host": self.host, "pid": os.getpid(), "phase": p.text,
                           "kind": p.kind, "elapsed_s": round(time.monotonic() - p.since, 3),
                           "beat": time.time(), "state": state})

    def _publish(self, state: str = "running") -> None:
        if not self._store_ok:
            return
        try:
            self.store.set(_STATUS_KEY.format(self.rank), self._record(state))
        except Exception as e:  # the store's host is gone: stop trying, never block training
            self._store_ok = False
            if state == "running":  # (at the end of a job the store's host may just have finished)
                log.warning("rank %d: cannot publish its status to the store any more (%s)", self.rank,
                            _first_line(e))

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._publish()

    def _watch(self) -> None:
        while not self._stop.wait(min(0.5, self.interval_s)):
            p = self._phase
            waited = time.monotonic() - p.since
            if p.kind == "data" and waited > self.timeout_s:
                self._stalled(p, waited)
                return

    def _stalled(self, p: Phase, waited: float) -> None:
        msg = (f"rank {self.rank} (host {self.host}, pid {os.getpid()}): no batch from the data loader for "
               f"{waited:.1f} s (> launch.timeout_s {self.timeout_s:g}) while {p.text}; ending this process "
               f"so that the job fails instead of hanging")
        self._publish_bounded("stalled")  # for the peers' diagnosis
        log.error(msg)
        for h in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                h.flush()
        with contextlib.suppress(Exception):
            print(f"error: {msg}", file=sys.stderr, flush=True)
        os._exit(EXIT_STALLED)

    # ------------------------------------------------------------------ diagnosis

    def peer_status(self) -> dict[int, Optional[dict]]:
        """Every other rank's last published status (None: nothing published)."""
        out: dict[int, Optional[dict]] = {}
        if self.store is None:
            return out
        for r in range(self.world_size):
            if r == self.rank:
                continue
            key = _STATUS_KEY.format(r)
            try:
                out[r] = json.loads(self.store.get(key)) if self.store.check([key]) else None
            except Exception as e:
                out[r] = {"error": _first_line(e)}
                break  # the store is unreachable: do not wait on it once per rank
        return out

    def describe_peers(self, max_lines: int = 8) -> list[str]:
        """One line per other rank; with more than ``max_lines`` of them, the ranks that were
        in a collective (waiting, like this one) are only counted and the others listed."""
        now = time.time()
        rows: list[tuple[int, str, bool]] = []  # (rank, line, waiting in a collective)
        for r, st in sorted(self.peer_status().items()):
            if st is None:
                rows.append((r, f"rank {r}: no status published (it may not have reached training)", False))
            elif "error" in st:
                rows.append((r, f"rank {r}: status unreadable ({st['error']}); the store's host may be gone",
                             False))
            else:
                state = st.get("state", "running")
                prefix = "" if state == "running" else f"{state.upper()}, "
                line = (f"rank {r} (host {st.get('host')}, pid {st.get('pid')}): {prefix}{st.get('phase')}, "
                        f"for {st.get('elapsed_s', 0.0):.1f} s at its last heartbeat "
                        f"{max(now - st.get('beat', now), 0.0):.1f} s ago")
                rows.append((r, line, st.get("kind") == "collective" and state == "running"))
        if len(rows) <= max_lines:
            return [line for _, line, _ in rows]
        waiting = [r for r, _, w in rows if w]
        lines = [line for _, line, w in rows if not w]
        if waiting:
            lines.append(f"{len(waiting)} other rank(s) were in a collective too: "
                         f"{', '.join(map(str, waiting[:32]))}{' ...' if len(waiting) > 32 else ''}")
        return lines

    def explain(self, exc: BaseException) -> str:
        """What failed here and what every other rank was doing."""
        p = self._phase
        head = (f"rank {self.rank} (host {self.host}): a collective failed after {time.monotonic() - p.since:.1f} s "
                f"while {p.text} (launch.timeout_s {self.timeout_s:g}): {_first_line(exc)}")
        peers = self.describe_peers()
        return head + "".join(f"\n  {line}" for line in peers)


class MonitoredLoader:
    """A loader that records its waits in a :class:`RankMonitor` ("waiting for train batch
    k/N of epoch e from the data loader"); everything else is the wrapped loader's."""

    def __init__(self, loader, monitor: RankMonitor, kind: str = "train"):
        self.__dict__.update(_loader=loader, _monitor=monitor, _kind=kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_loader"], name)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator:
        loader, monitor, kind = self._loader, self._monitor, self._kind
        total = len(loader)
        epoch = getattr(loader, "epoch", "?")
        position = int(getattr(getattr(loader, "sampler", None), "consumed", 0) or 0)
        it = iter(loader)
        while True:
            label = f"{position + 1}/{total} of epoch {epoch}"
            monitor.set_phase(f"waiting for {kind} batch {label} from the data loader", "data")
            try:
                batch = next(it)
            except StopIteration:
                break
            monitor.set_phase(f"{'evaluating' if kind == 'cv' else 'training on'} {kind} batch {label}", "compute")
            yield batch
            position += 1
        monitor.set_phase(f"after the {kind} batches of epoch {epoch} "
                          f"({'summing CV results, checkpoint, rank-0 decisions' if kind == 'cv' else 'CV next'})",
                          "other")
