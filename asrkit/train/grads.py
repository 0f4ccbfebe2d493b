"""Gradient arithmetic of an optimizer step without host syncs.

The executor reads the device once per optimizer step (the step all-reduce's sums); these
helpers keep everything else on the device: the step's sums are copied to the device from
pinned memory without waiting, the gradient norm is computed there and read with those sums,
and normalising and clipping become one multiply by a Python number.  On a GPU every
blocking copy or ``.item()`` makes the host wait for all queued work, so a step with a dozen
of them cannot overlap the next micro-batch's kernel launches with the GPU's work.
"""
from __future__ import annotations

from typing import Sequence

import torch


def to_device_async(values: Sequence[float], device: torch.device) -> torch.Tensor:
    """``values`` as a float64 tensor on ``device``: on CUDA copied from pinned host memory
    without blocking the host (the caching host allocator keeps the pinned block until the
    copy is done), elsewhere made in place."""
    host = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def gradient_norm(params: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The 2-norm of all gradients of ``params`` together, a 0-dim tensor on ``device`` (0
    when none has a gradient); not finite when any gradient element is not."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), device=device)
    return torch.nn.utils.get_total_norm(grads, norm_type=2.0).to(device)


def clip_coefficient(grad_norm: float, max_norm: float) -> float:
    """The factor that clips gradients of norm ``grad_norm`` to ``max_norm``, as
    ``torch.nn.utils.clip_grad_norm_`` computes it: ``max_norm / (grad_norm + 1e-6)``, at most 1."""
    return min(1.0, max_norm / (grad_norm + 1e-6))


def scale_gradients(params: Sequence[torch.Tensor], factor: float) -> None:
    """Multiply every gradient of ``params`` by ``factor`` (one fused multiply per device and
    dtype, as torch's own clipping does)."""
    grads = [p.grad for p in params if p.grad is not None]
    if grads and factor != 1.0:
        torch._foreach_mul_(grads, factor)
