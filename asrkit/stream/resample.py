"""Resampling a stream piece by piece, exactly as the whole signal is resampled.

:class:`StreamResampler` applies the filter of :func:`asrkit.data.audio.resampler` (torchaudio's
Hann-windowed sinc) the way torchaudio applies it to a whole signal -- the input padded with
``width`` zeros before and ``width + orig`` after (rates divided by their greatest common
divisor), a strided convolution giving ``new`` output samples per ``orig`` input samples, the
result cut to ``ceil(new * T / orig)`` samples -- but emits each block of ``new`` outputs as
soon as the ``2 * width + orig`` inputs it reads have arrived.  The concatenated outputs of
:meth:`~StreamResampler.accept` over any cutting of the input, followed by
:meth:`~StreamResampler.finish`, equal :func:`asrkit.data.audio.resample` of the whole input
(to float rounding: the same products summed per block).  The output lags the input by the
filter's half width plus at most one block (8 -> 16 kHz: 8 input samples, 1 ms); the state kept
is that many input samples.
"""
from __future__ import annotations

import math

import torch

from asrkit.data.audio import resampler


class StreamResampler:
    """Float32 samples ``[T]`` at ``orig_rate`` in, at ``new_rate`` out (module docstring);
    equal rates pass the samples through."""

    def __init__(self, orig_rate: int, new_rate: int):
        self.orig_rate, self.new_rate = int(orig_rate), int(new_rate)
        self.received = 0      # input samples accepted
        self.emitted = 0       # output samples given
        if self.orig_rate == self.new_rate:
            return
        filt = resampler(self.orig_rate, self.new_rate)
        gcd = math.gcd(self.orig_rate, self.new_rate)
        self.step, self.per_block = self.orig_rate // gcd, self.new_rate // gcd
        self.kernel, self.width = filt.kernel, int(filt.width)
        self.pending = torch.zeros(self.width)  # the inputs still read, from the next block's first on

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """The output samples that ``samples`` (appended to the stream) complete."""
        samples = samples.reshape(-1).to(torch.float32)
        self.received += samples.numel()
        if self.orig_rate == self.new_rate:
            self.emitted += samples.numel()
            return samples
        self.pending = torch.cat([self.pending, samples])
        return self._blocks()

    def finish(self) -> torch.Tensor:
        """The rest of the output (the stream has ended); the resampler is then spent."""
        if self.orig_rate == self.new_rate:
            return torch.zeros(0)
        self.pending = torch.cat([self.pending, torch.zeros(self.width + self.step)])
        out = self._blocks()
        target = math.ceil(self.per_block * self.received / self.step)
        out = out[:max(0, target - (self.emitted - out.numel()))]
        self.emitted = target
        self.pending = self.pending[:0]
        return out

    def _blocks(self) -> torch.Tensor:
        size = self.kernel.shape[-1]  # 2 * width + step inputs per block
        count = (self.pending.numel() - size) // self.step + 1 if self.pending.numel() >= size else 0
        if count == 0:
            return torch.zeros(0)
        used = self.pending[:(count - 1) * self.step + size]
        out = torch.nn.functional.conv1d(used[None, None], self.kernel, stride=self.step)
        self.pending = self.pending[count * self.step:]
        out = out.transpose(1, 2).reshape(-1)
        self.emitted += out.numel()
        return out
