"""Mixed precision on a CPU: decided by what the CPU can do.

``dtype: bf16`` and ``dtype: fp16`` train under ``torch.autocast`` (CTC stays fp32,
``asrkit/models/ctc.py``); fp16 adds a dynamic ``torch.amp.GradScaler`` for the device.
On a GPU the device decides (preflight: bf16 needs compute capability 8.0+).  On a CPU the
instruction set does:

* **bf16 with native support** -- the ``avx512_bf16`` or ``amx_bf16`` flag (AMD Zen 4 and
  later, Intel Cooper Lake / Sapphire Rapids and later), or ``bf16`` on Arm: the fast
  precision of the machine (a bf16 matmul ~3x an fp32 one on the 2-core EPYC of
  docs/performance.md), logged;
* **bf16 without it**: oneDNN emulates bf16 with fp32 instructions plus conversions --
  measured ~27x slower than fp32 on an AVX2 machine (docs/experiments/cpu_precision_avx2.md);
  it runs, with a warning that says so;
* **fp16** (no native fp16 arithmetic on x86 before AVX512-FP16 / AMX-FP16): runs with the
  CPU GradScaler, with a warning when the CPU has neither flag -- it is there to exercise the
  fp16 path (loss scaling, its calibration skips, its state in checkpoints) where no GPU is;
  bf16 is a CPU's fast mixed precision.

:func:`cpu_capabilities` reads the flags of ``/proc/cpuinfo`` (Linux; elsewhere none are
known and the warnings say so); tests pass their own :class:`CpuCapabilities`.

``dtype: auto`` (asrkit's value, not WeNet's) is :func:`resolve_auto_dtype`: bf16 where the
device computes it natively -- the recipes' choice, measured to keep their accuracy
(docs/performance.md) -- and fp32 elsewhere, decided on each rank before anything is built.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import torch

AVX2_BF16_SLOWDOWN = "~27x slower than fp32 (measured on an AVX2 machine, docs/experiments/cpu_precision_avx2.md)"


@dataclasses.dataclass(frozen=True)
class CpuCapabilities:
    """What the CPU offers for 16-bit floats: its feature ``flags`` (lower case, as
    ``/proc/cpuinfo`` lists them) and ``isa``, torch's kernel level
    (``torch.backends.cpu.get_cpu_capability()``: ``AVX2``, ``AVX512``, ...)."""

    flags: frozenset
    isa: str

    def native(self, dtype: str) -> list[str]:
        """The flags that give ``dtype`` (``bf16`` or ``fp16``) native arithmetic."""
        wanted = {"bf16": ("avx512_bf16", "amx_bf16", "bf16"), "fp16": ("avx512_fp16", "amx_fp16", "fphp")}[dtype]
        return [f for f in wanted if f in self.flags]


def cpu_capabilities(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuCapabilities:
    """This machine's :class:`CpuCapabilities` (no flags where ``cpuinfo`` cannot be read)."""
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):  # x86, Arm
                flags.update(value.split())
                break
    except OSError:
        pass
    return CpuCapabilities(frozenset(flags), torch.backends.cpu.get_cpu_capability())


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The decision for one run: the line to log and whether it is a warning."""

    line: str
    warning: bool


def cpu_precision(dtype: str, caps: Optional[CpuCapabilities] = None) -> Optional[PrecisionChoice]:
    """The decision for ``dtype`` (``fp32``, ``bf16``, ``fp16``) on a CPU with ``caps``
    (default: this one's); None for fp32 (nothing to decide).  Never a refusal: every
    precision runs on every CPU, the slow ones with a warning (module docstring)."""
    if dtype == "fp32":
        return None
    caps = caps or cpu_capabilities()
    native = caps.native(dtype)
    if dtype == "bf16":
        if native:
            return PrecisionChoice(f"bf16 autocast on a CPU with native bf16 ({', '.join(native)}; torch {caps.isa} "
                                   "kernels); CTC is computed in fp32", warning=False)
        return PrecisionChoice(f"dtype: bf16 on a CPU without native bf16 (no avx512_bf16 / amx_bf16 flag; torch "
                               f"{caps.isa} kernels): bf16 is emulated there, {AVX2_BF16_SLOWDOWN}; dtype: fp32 is "
                               "the fast choice on this CPU", warning=True)
    if native:
        return PrecisionChoice(f"fp16 autocast on a CPU with native fp16 ({', '.join(native)}) and a dynamic "
                               "GradScaler; CTC is computed in fp32", warning=False)
    return PrecisionChoice(f"dtype: fp16 on a CPU without native fp16 (no avx512_fp16 / amx_fp16 flag; torch "
                           f"{caps.isa} kernels): fp16 is emulated and runs for checking the fp16 path (loss "
                           "scaling with a dynamic GradScaler); bf16 is a CPU's fast mixed precision where it "
                           "has avx512_bf16 or amx_bf16", warning=True)


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
