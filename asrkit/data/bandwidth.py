"""Bandwidth limitation (``dataset_conf.band_limit`` + ``band_limit_conf``): the telephone
channel simulated on wideband training audio, on waveforms ``[1, T]`` float32.

With probability ``band_limit_apply_prob`` a rate is drawn uniformly from ``rates`` among
those below the sample's own rate, and the waveform is resampled down to it and back up
(``asrkit.data.audio.resample``'s windowed sinc, the resampler decoding applies to 8 kHz
input): the result has the utterance's length and rate and no content above the drawn
rate's Nyquist frequency.  A sample already at or below every listed rate is left as it
is.  ESPnet's data simulation calls this ``bandwidth_limitation``.

Why: a 16 kHz model trained on wideband audio alone meets an empty upper half of its mel
bins in every 8 kHz recording (telephony, the Free Spoken Digit Dataset) upsampled for it;
the digits recipe's synthetic-only model went from 1.1 % to 10.5 % CER on its own test set
band-limited to 4 kHz (docs/experiments/fsdd_real_speech.md).

**Randomness.**  One generator per sample seeded by (seed, epoch, key, ``"band_limit"``)
(``asrkit.data.processors.sample_generator``): the first draw decides whether the step
applies, the second picks the rate.
"""
from __future__ import annotations

from typing import Sequence

import torch

from asrkit.data import audio


def limit_bandwidth(wav: torch.Tensor, sample_rate: int, generator: torch.Generator, *, rates: Sequence[int],
                    prob: float) -> torch.Tensor:
    """The band-limit step on ``wav`` at ``sample_rate`` with the draws of ``generator``
    (module docstring)."""
    if float(torch.rand((), generator=generator)) >= prob:
        return wav
    lower = [int(r) for r in rates if int(r) < sample_rate]
    if not lower:
        return wav
    rate = lower[int(torch.randint(len(lower), (), generator=generator))]
    narrow = audio.resample(audio.resample(wav, sample_rate, rate), rate, sample_rate)
    length = wav.shape[1]
    if narrow.shape[1] >= length:
        return narrow[:, :length]
    return torch.nn.functional.pad(narrow, (0, length - narrow.shape[1]))
