"""Additive noise at a drawn SNR and volume perturbation, on waveforms ``[1, T]`` float32.

:func:`mix_at_snr` is the arithmetic; :func:`add_noise` and :func:`perturb_volume` are the
sample-chain steps (``asrkit.data.processors`` composes them, training only).

**Noise** (``dataset_conf.noise`` + ``noise_conf``; ESPnet's ``noise_scp``,
``noise_apply_prob``, ``noise_db_range``): with probability ``noise_apply_prob`` a
recording of the noise list is drawn uniformly, then an SNR uniform in ``noise_db_range``
(dB) and a start offset in the recording.  The noise is read from that offset, repeated
when it is shorter than the utterance, scaled so that

    10 log10( mean(speech²) / mean(noise²) ) = SNR

over the utterance (the powers of the actual signals, as ESPnet computes them), and added.
When the sum would leave [-1, 1] it is scaled down as a whole (the SNR is kept).  A silent
utterance or a silent stretch of noise leaves the audio as it is.

**Volume** (``dataset_conf.volume_perturb`` + ``volume_perturb_conf``; Kaldi's
``perturb_data_dir_volume.sh`` ``--scale-low``/``--scale-high``): with probability
``volume_apply_prob`` the waveform is multiplied by a factor uniform in
[``scale_low``, ``scale_high``] -- with ``scale_distribution: log_uniform``, uniform in decibels
between them, so quiet gains are drawn as often as loud ones -- (not clipped: the features are
computed from floats).

**Randomness.**  Each step draws from its own generator seeded by (seed, epoch, key, step
name) -- ``asrkit.data.processors.sample_generator`` with a stream name -- in the order
written above, so switching one augmentation on or off changes no other draw (speed,
dither, SpecAugment), and a sample is augmented identically in any worker and after a
resume.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from asrkit.data.noise_lists import AudioCache


def db_range(value) -> tuple[float, float]:
    """``(low, high)`` dB of a ``noise_db_range``: ``[low, high]``, one number, or ESPnet's
    strings ``"low_high"`` / ``"value"``; ``ValueError`` when it is none of them."""
    if isinstance(value, str):
        parts = value.split("_")
        if len(parts) not in (1, 2):
            raise ValueError(f"expected 'LOW_HIGH' or 'VALUE' (ESPnet's form) or [LOW, HIGH], got {value!r}")
        value = [float(p) for p in parts]
    elif isinstance(value, (int, float)):
        value = [value]
    values = [float(v) for v in value]
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or values[0] > values[1]:
        raise ValueError(f"expected [LOW, HIGH] with LOW <= HIGH, got {value!r}")
    return values[0], values[1]


def _uniform(low: float, high: float, generator: torch.Generator) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator, dtype=torch.float64))


def noise_segment(noise: torch.Tensor, length: int, offset: int) -> torch.Tensor:
    """``length`` samples of ``noise`` ``[N]`` from ``offset`` on, wrapping around."""
    index = (torch.arange(length) + offset) % noise.numel()
    return noise[index]


def mix_at_snr(wav: torch.Tensor, noise: torch.Tensor, snr_db: float) -> torch.Tensor:
    """``wav`` ``[1, T]`` plus ``noise`` ``[T]`` scaled to ``snr_db`` (module docstring)."""
    # (numpy's sums: one order whatever torch's thread count, so a worker and the training
    # process mix the same bits)
    speech_power = float(np.mean(wav.detach().double().numpy() ** 2))
    noise_power = float(np.mean(noise.detach().double().numpy() ** 2))
    if speech_power <= 0.0 or noise_power <= 0.0:
        return wav
    scale = (speech_power / (noise_power * 10.0 ** (snr_db / 10.0))) ** 0.5
    mixed = wav + (scale * noise.double()).to(wav.dtype).unsqueeze(0)
    peak = float(mixed.abs().max())
    return mixed / peak if peak > 1.0 else mixed


def add_noise(wav: torch.Tensor, sample_rate: int, generator: torch.Generator, *, noises: AudioCache,
              prob: float, snr_range: tuple[float, float]) -> torch.Tensor:
    """The noise step on ``wav`` ``[1, T]`` with the draws of ``generator`` (module
    docstring); an unreadable noise recording raises ``DataFault("unreadable_noise")``."""
    if float(torch.rand((), generator=generator)) >= prob:
        return wav
    index = int(torch.randint(len(noises), (), generator=generator))
    snr_db = _uniform(*snr_range, generator)
    noise = noises.get(index, sample_rate)
    offset = int(torch.randint(noise.numel(), (), generator=generator))
    return mix_at_snr(wav, noise_segment(noise, wav.shape[1], offset), snr_db)


def perturb_volume(wav: torch.Tensor, generator: torch.Generator, *, prob: float, scale_low: float,
                   scale_high: float, log_uniform: bool = False) -> torch.Tensor:
    """The volume step on ``wav`` with the draws of ``generator`` (module docstring)."""
    if float(torch.rand((), generator=generator)) >= prob:
        return wav
    if log_uniform:
        return wav * math.exp(_uniform(math.log(scale_low), math.log(scale_high), generator))
    return wav * _uniform(scale_low, scale_high, generator)
