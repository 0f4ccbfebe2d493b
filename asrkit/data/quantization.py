"""Requantization (``dataset_conf.requantize`` + ``requantize_conf``): a recording device's
sample depth simulated on training waveforms ``[1, T]`` float32 (full scale 1.0).

With probability ``requantize_apply_prob`` a depth is drawn uniformly from ``bits`` and every
sample is rounded to the nearest multiple of ``2 ** (1 - bits)`` (a ``bits``-bit signed PCM
grid: 8 bits keep 256 levels).  Nothing is clipped: a sample beyond full scale keeps its
magnitude (volume perturbation may have raised it), rounded on the same grid.  Quiet passages
become exact zeros and the rest gains the grid's rounding noise, as in 8-bit recordings and
in G.711 telephony's 8-bit samples.

Why: one of the four shipped real speakers (nicolas) was recorded with 8-bit samples in 16-bit
files (every sample a multiple of 256, 13 % of them exactly zero); models that never met such
audio in training heard him worst (docs/experiments/fsdd_real_speech.md).

**Randomness.**  One generator per sample seeded by (seed, epoch, key, ``"requantize"``)
(``asrkit.data.processors.sample_generator``): the first draw decides whether the step
applies, the second picks the depth.
"""
from __future__ import annotations

from typing import Sequence

import torch


def requantize(wav: torch.Tensor, generator: torch.Generator, *, bits: Sequence[int], prob: float) -> torch.Tensor:
    """The requantization step on ``wav`` with the draws of ``generator`` (module docstring)."""
    if float(torch.rand((), generator=generator)) >= prob:
        return wav
    depth = int(bits[int(torch.randint(len(bits), (), generator=generator))])
    levels = float(2 ** (depth - 1))
    return torch.round(wav * levels) / levels
