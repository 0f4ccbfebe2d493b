"""World-size scaling of ``accum_grad``: keeping the global batch of a config tuned on another
number of ranks."""
from __future__ import annotations

import logging
import math
from typing import Optional

log = logging.getLogger("asrkit.train")



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


def world_change(saved_world: int, saved_accum: Optional[int], world_size: int,
                 accum_grad: int) -> Optional[tuple[str, bool]]:
    """What changes when a run saved on ``saved_world`` ranks with ``saved_accum`` (None:
    not recorded) resumes on ``world_size`` ranks with ``accum_grad`` (already scaled by
    :func:`scale_accum_grad`): ``(the line to log, whether the global batch changed)``, or
    None on the same world size."""
    if saved_world == world_size:
        return None
    head = (f"resuming on {world_size} rank(s) a run saved on {saved_world}: the epoch's remaining batches are "
            f"re-dealt over {world_size} rank(s) (no utterance lost or repeated)")
    if saved_accum is None:
        return f"{head}; the checkpoint does not record its accum_grad", False
    before, now = saved_world * saved_accum, world_size * accum_grad
    if before == now:
        return (f"{head}; global batch kept: {before} per-rank batches per optimizer step (accum_grad "
                f"{saved_accum} -> {accum_grad})"), False
    return (f"{head}; the global batch changes from {before} to {now} per-rank batches per optimizer step "
            f"(accum_grad {saved_accum} -> {accum_grad}) -- to keep it, set reference_world_size: {saved_world} "
            f"(with accum_grad {saved_accum}) and keep_global_batch: true"), True


def log_world_change(saved_world: int, saved_accum: Optional[int], world_size: int, accum_grad: int) -> None:
    """Log :func:`world_change`'s line, if any: a warning when the global batch changes."""
    change = world_change(saved_world, saved_accum, world_size, accum_grad)
    if change:
        (log.warning if change[1] else log.info)("%s", change[0])
