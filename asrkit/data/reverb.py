"""Reverberation: convolution with a room impulse response (RIR) drawn from a list.

``dataset_conf.reverb`` + ``reverb_conf`` (ESPnet's ``rir_scp``, ``rir_apply_prob``):
with probability ``rir_apply_prob`` a recording of the RIR list
(``asrkit.data.noise_lists``: Kaldi's RIRS_NOISES ``rir_list``, a ``wav.scp`` or paths) is
drawn uniformly and the utterance convolved with it (:func:`reverberate`):

* **aligned on the direct path**: the output starts at the RIR's strongest tap (its
  ``argmax |h|``), as ESPnet and lhotse do, so the transcript's timing and the length do not
  move (``T`` samples in, ``T`` out; the reverberant tail past the end is cut);
* **normalised to the input's power**: the output is scaled to the mean power of the
  input, so the level the model hears does not depend on the RIR's gain.

A single-tap RIR (one positive sample, anywhere, of any gain) therefore gives the input back.
Draws come from the generator of (seed, epoch, key, ``"reverb"``) (see
``asrkit.data.noise``); an unreadable RIR file is a counted skip (``unreadable_rir``).
"""
from __future__ import annotations

import numpy as np
import torch

from asrkit.data.noise_lists import AudioCache


def fft_length(n: int) -> int:
    """The smallest even length >= ``n`` whose prime factors are 2, 3 and 5 (fast FFTs)."""
    best = 1 << max(n - 1, 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35 * 2
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def reverberate(wav: torch.Tensor, rir: torch.Tensor) -> torch.Tensor:
    """``wav`` ``[1, T]`` convolved with ``rir`` ``[L]`` (module docstring), by FFT in float64
    with numpy's pocketfft: single-threaded, so the result is the same bits in a DataLoader
    worker (one torch thread) and in the training process (several)."""
    length = wav.shape[1]
    x = wav.detach().double().numpy()
    h = rir.detach().double().numpy()
    direct = int(np.abs(h).argmax())
    h = h[direct:]  # the taps before the direct path would only fall before the output's start
    nfft = fft_length(length + h.size - 1)
    out = np.fft.irfft(np.fft.rfft(x, nfft) * np.fft.rfft(h, nfft), nfft)[..., :length]
    power_in, power_out = float(np.mean(x ** 2)), float(np.mean(out ** 2))
    if power_out > 0.0:
        out = out * (power_in / power_out) ** 0.5
    return torch.from_numpy(out).to(wav.dtype)


def add_reverb(wav: torch.Tensor, sample_rate: int, generator: torch.Generator, *, rirs: AudioCache,
               prob: float) -> torch.Tensor:
    """The reverberation step on ``wav`` ``[1, T]`` with the draws of ``generator``
    (module docstring)."""
    if float(torch.rand((), generator=generator)) >= prob:
        return wav
    rir = rirs.get(int(torch.randint(len(rirs), (), generator=generator)), sample_rate)
    return reverberate(wav, rir)
