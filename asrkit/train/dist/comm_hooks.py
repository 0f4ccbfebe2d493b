"""DDP communication hooks chosen by ``ddp_conf.comm_hook`` (torch's own hooks, registered
on the DDP model by :func:`register_comm_hook`).

What each sends per optimizer step, for N gradient elements over W ranks:

* ``none``: DDP's all-reduce of the fp32 buckets (4·N bytes per rank into the all-reduce);
* ``fp16`` / ``bf16``: torch's ``fp16_compress_hook`` / ``bf16_compress_hook``: each bucket
  is cast, divided by W, all-reduced in 16 bits and cast back (2·N bytes).  The gradients
  DDP hands over are loss *sums* over the rank's batch (the executor normalises after the
  all-reduce), so an element above 65504·W overflows fp16 to inf; the executor then skips
  the step as non-finite.  bf16 has fp32's range and 8 bits of mantissa;
* ``powersgd``: torch's ``powerSGD_hook``: the first ``powersgd_start_iter`` all-reduces are
  plain; after that each weight matrix n×m (viewed as 2-D) whose rank-r factors are at least
  2× smaller is sent as P (n×r) and Q (m×r), the rest (biases, norms) uncompressed; error
  feedback adds what the approximation missed to the next step's gradient, and warm start
  begins each power iteration from the previous step's Q.

Interplay with the executor (``asrkit.train.executor``):

* ``accum_grad``: the micro-batches run under ``no_sync`` call no hook; the hook runs once
  per optimizer step, on the sum of the group's gradients.  PowerSGD counts its iterations
  in these all-reduces (a step skipped as non-finite counts too);
* the hooks return the average over ranks, as DDP's own all-reduce does, so the executor's
  normalisation (× W / global count) and ``grad_clip`` apply unchanged -- clipping acts on
  the decompressed gradient;
* non-finite: a PowerSGD bucket whose error-feedback or warm-start memory is no longer
  finite after an all-reduce (an inf/NaN gradient went into it) has that memory dropped, so
  the next step starts that bucket afresh instead of failing every step after a fault;
* PowerSGD buckets are communicated one after the other (see :func:`_powersgd_in_order`:
  torch's hook, unwaited, lets gloo ranks mismatch their all-reduces when there are
  several buckets), so its communication does not overlap the backward.

Resume (``--checkpoint``): checkpoints hold no PowerSGD memory.  A resumed run starts with
empty error feedback and a fresh random Q (seeded from ``seed + step``), and compresses from
its ``max(2, powersgd_start_iter - step)``-th all-reduce on (two plain ones first, while DDP
settles its buckets).  So a resume is deterministic (two resumes from one checkpoint train
the same weights) but not bit-equal to the uninterrupted run: it loses the residual error
feedback held at the checkpoint (one step's approximation error).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import numpy as np
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from asrkit.train.problems import Problem, ProblemKind

log = logging.getLogger("asrkit.train")

# Factors (n + m)·r must be at least this many times smaller than n·m to be sent as factors
# (torch's default): smaller matrices are not worth the extra compute.
MIN_COMPRESSION_RATE = 2.0


def comm_hook_problem(comm_hook: str, backend: str, device: torch.device) -> Optional[Problem]:
    """Why ``comm_hook`` cannot run with ``backend`` on ``device`` (None when it can).

    Only ``bf16`` depends on them: nccl all-reduces bfloat16 (NCCL >= 2.10); torch 2.14's
    gloo does so for CPU tensors (tests/train/dist/test_comm_hooks.py trains with it) but not for
    CUDA tensors ("Invalid scalar type", pytorch issue #111131)."""
    if comm_hook != "bf16" or backend == "nccl" or (backend == "gloo" and device.type == "cpu"):
        return None
    return Problem(ProblemKind.SETTING,
                   f"ddp_conf.comm_hook: bf16 needs a backend that all-reduces bfloat16 tensors on this device "
                   f"(nccl, or gloo on CPU), but this run uses {backend} on {device.type}",
                   "use comm_hook: fp16 (same bytes, fp16 range) or dist_backend: nccl")


def wire_elements(shapes: list[tuple[int, ...]], conf) -> tuple[int, int]:
    """(elements all-reduced per step uncompressed, elements sent once ``conf.comm_hook``
    compresses) for parameters of ``shapes``: for PowerSGD, per matrix the rank-r factors
    when torch's hook compresses it, else the matrix; 16-bit hooks send the same count as
    ``none`` (at half the bytes: see :func:`bytes_per_element`)."""
    full = sum(int(np.prod(s)) for s in shapes)
    if conf.comm_hook != "powersgd":
        return full, full
    sent = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        r = min(n, m, conf.powersgd_rank)
        compressed = (n + m) * r
        sent += compressed if compressed * MIN_COMPRESSION_RATE < n * m else n * m
    return full, sent


def bytes_per_element(comm_hook: str) -> int:
    """Bytes of one all-reduced gradient element under ``comm_hook``."""
    return 2 if comm_hook in ("fp16", "bf16") else 4


@dataclasses.dataclass
class CommHook:
    """The hook registered on one DDP model: its name and, for PowerSGD, torch's state."""

    name: str
    powersgd: Optional[powerSGD_hook.PowerSGDState] = None
    start_iter: int = 0
    seed: int = 0

    def resumed_at(self, step: int) -> None:
        """The run resumes after ``step`` optimizer steps (call before the first all-reduce):
        PowerSGD compresses from this process's ``max(2, start_iter - step)``-th all-reduce
        on, its random projections seeded from ``seed + step`` (see the module docstring)."""
        state = self.powersgd
        if state is None or step <= 0:
            return
        if state.iter != 0:
            raise RuntimeError("CommHook.resumed_at must be called before the first gradient all-reduce")
        state.start_powerSGD_iter = max(2, self.start_iter - step)
        state.rng = np.random.RandomState((self.seed + step) % 2**32)
        log.info("ddp_conf.comm_hook powersgd: resumed at step %d with empty error feedback; compression "
                 "from all-reduce %d of this process on", step, state.start_powerSGD_iter)


def describe(conf, world_size: int) -> str:
    """One log line: what the gradient all-reduce sends."""
    if world_size <= 1:
        return f"ddp_conf.comm_hook {conf.comm_hook}: one process, no gradient all-reduce"
    if conf.comm_hook == "none":
        return "ddp_conf.comm_hook none: DDP's fp32 gradient all-reduce"
    if conf.comm_hook in ("fp16", "bf16"):
        return f"ddp_conf.comm_hook {conf.comm_hook}: gradients all-reduced as {conf.comm_hook} (half the bytes)"
    return (f"ddp_conf.comm_hook powersgd: rank-{conf.powersgd_rank} PowerSGD with error feedback and warm "
            f"start after {conf.powersgd_start_iter} plain all-reduces")


def powersgd_state(conf, seed: int, process_group=None) -> powerSGD_hook.PowerSGDState:
    """torch's ``PowerSGDState`` for ``conf`` (the default process group when None)."""
    return powerSGD_hook.PowerSGDState(
        process_group=process_group, matrix_approximation_rank=conf.powersgd_rank,
        start_powerSGD_iter=conf.powersgd_start_iter, min_compression_rate=MIN_COMPRESSION_RATE,
        use_error_feedback=True, warm_start=True, random_seed=seed % 2**32)


def _powersgd_in_order(state: powerSGD_hook.PowerSGDState, bucket):
    """torch's ``powerSGD_hook`` for ``bucket``, waited for before returning, then a memory
    that is no longer finite is dropped.

    *In order*: torch's hook issues the bucket's second and third all-reduces (P, Q) from
    callbacks of the first, on whatever thread completes it; meanwhile DDP calls the hook of
    the next bucket from the autograd thread.  With several buckets the ranks then enqueue
    their all-reduces in different orders and gloo fails ("Received data size doesn't match
    expected size"; reproduced with the small conformer's 2 buckets, and at every run with
    many small buckets: tests/train/dist/test_comm_hooks.py).  Waiting here makes every rank send
    bucket after bucket in DDP's order -- at the cost of PowerSGD's communication no longer
    overlapping the rest of the backward.

    *Non-finite*: a bucket whose error-feedback or warm-start memory holds inf/NaN loses it
    (the next step starts the bucket afresh).  The warm-start P and Q are all-reduced, so
    every rank drops them alike; the error feedback is each rank's own.  (No annotations:
    DDP compares them with its own objects, which this module's postponed annotations are
    not.)"""
    value = powerSGD_hook.powerSGD_hook(state, bucket).wait()
    index = bucket.index()
    memories = (state.error_dict, state.p_memory_dict, state.q_memory_dict)
    if any(index in m and not bool(torch.isfinite(m[index]).all()) for m in memories):
        for m in memories:
            m.pop(index, None)
        log.warning("ddp_conf.comm_hook powersgd: bucket %d's error feedback was not finite after "
                    "all-reduce %d; reset", index, state.iter)
    done = torch.futures.Future()
    done.set_result(value)
    return done


def register_comm_hook(model: torch.nn.Module, conf, seed: int) -> CommHook:
    """Register ``conf.comm_hook`` on the DDP ``model`` (nothing for ``none``) and return it.

    ``seed`` seeds PowerSGD's random projections (the same on every rank: they must match)."""
    if conf.comm_hook == "none":
        return CommHook("none")
    if conf.comm_hook in ("fp16", "bf16"):
        hook = default_hooks.fp16_compress_hook if conf.comm_hook == "fp16" else default_hooks.bf16_compress_hook
        model.register_comm_hook(None, hook)
        return CommHook(conf.comm_hook)
    state = powersgd_state(conf, seed)
    model.register_comm_hook(state, _powersgd_in_order)
    return CommHook("powersgd", state, conf.powersgd_start_iter, seed)
