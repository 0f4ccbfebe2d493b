"""Mixed precision of a training run: decided by what the device can do.

``dtype: bf16`` and ``dtype: fp16`` train under ``torch.autocast`` (CTC stays fp32,
``asrkit/models/ctc.py``); fp16 adds a dynamic ``torch.amp.GradScaler`` for the device.
On a GPU the device decides (preflight: bf16 needs compute capability 8.0+).  On a CPU the
instruction set does (:mod:`asrkit.precision`: :func:`cpu_capabilities` reads the flags and
:func:`cpu_precision` gives the line to log -- a warning for emulated bf16 or fp16; they
live there, below training, because decoding warns with the same line).

``dtype: auto`` (asrkit's value, not WeNet's) is :func:`resolve_auto_dtype`: bf16 where the
device computes it natively -- the recipes' choice, measured to keep their accuracy
(docs/performance.md) -- and fp32 elsewhere, decided on each rank before anything is built.
"""
from __future__ import annotations

from typing import Optional

import torch

from asrkit.precision import (AVX2_BF16_SLOWDOWN, CpuCapabilities, PrecisionChoice, cpu_capabilities,
                              cpu_precision)

__all__ = ["AVX2_BF16_SLOWDOWN", "CpuCapabilities", "PrecisionChoice", "cpu_capabilities", "cpu_precision",
           "resolve_auto_dtype"]


def resolve_auto_dtype(device: torch.device, caps: Optional[CpuCapabilities] = None,
                       cuda_bf16: Optional[bool] = None) -> tuple[str, str]:
    """``(dtype, why)`` for ``dtype: auto`` on ``device``: ``"bf16"`` on a GPU that supports
    it (compute capability 8.0+; ``cuda_bf16`` overrides the query, for tests) or a CPU with
    native bf16 (``caps``, default this one's: :meth:`CpuCapabilities.native`), else
    ``"fp32"`` -- never fp16, whose loss scaling is a choice a user makes.  ``why`` is the
    line to log."""
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported() if cuda_bf16 is None else cuda_bf16
        return (("bf16", "dtype auto -> bf16: the GPU computes bf16 natively") if supported else
                ("fp32", "dtype auto -> fp32: the GPU has no bf16 (compute capability < 8.0)"))
    if device.type != "cpu":
        return "fp32", f"dtype auto -> fp32 on {device.type}"
    caps = caps or cpu_capabilities()
    native = caps.native("bf16")
    if native:
        return "bf16", f"dtype auto -> bf16: the CPU has native bf16 ({', '.join(native)})"
    return "fp32", (f"dtype auto -> fp32: the CPU has no native bf16 (no avx512_bf16 / amx_bf16 flag; torch "
                    f"{caps.isa} kernels), where bf16 is {AVX2_BF16_SLOWDOWN.split(' (')[0]}")
