"""What a CPU computes natively in 16 bits, and the line that says so: shared by training
(``asrkit.train.precision``, which decides a run's precision from it) and decoding
(recognize, ``asrkit transcribe``), which warn about the same slow case.

* **bf16 with native support** -- the ``avx512_bf16`` or ``amx_bf16`` flag (AMD Zen 4 and
  later, Intel Cooper Lake / Sapphire Rapids and later), or ``bf16`` on Arm: the fast
  precision of the machine (a bf16 matmul ~3x an fp32 one on the 2-core EPYC of
  docs/performance.md), logged;
* **bf16 without it**: oneDNN emulates bf16 with fp32 instructions plus conversions --
  measured ~27x slower than fp32 on an AVX2 machine in training
  (docs/experiments/cpu_precision_avx2.md); it runs, with a warning that says so;
* **fp16** (no native fp16 arithmetic on x86 before AVX512-FP16 / AMX-FP16): runs with the
  CPU GradScaler, with a warning when the CPU has neither flag -- it is there to exercise the
  fp16 path (loss scaling, its calibration skips, its state in checkpoints) where no GPU is;
  bf16 is a CPU's fast mixed precision.

:func:`cpu_capabilities` reads the flags of ``/proc/cpuinfo`` (Linux; elsewhere none are
known and the warnings say so); tests pass their own :class:`CpuCapabilities` or replace
:func:`cpu_capabilities`.
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


def decoding_precision_warning(dtype: str, device: str | torch.device,
                               caps: Optional[CpuCapabilities] = None) -> Optional[str]:
    """The warning to log when decoding in ``dtype`` on ``device``: the line of
    :func:`cpu_precision` -- the one training logs -- for ``bf16`` on a CPU without native
    bf16 (``caps``, default this one's: emulated, several times slower than fp32); None
    otherwise (fp32, fp16 -- whose line is about training's loss scaling --, native bf16, a
    GPU)."""
    if dtype != "bf16" or torch.device(device).type != "cpu":
        return None
    choice = cpu_precision(dtype, caps)
    return choice.line if choice is not None and choice.warning else None
