"""Filterbank features computed incrementally from audio that arrives in pieces.

:class:`StreamingFbank` holds the samples not yet covered by a whole frame and, at each
:meth:`~StreamingFbank.accept`, returns the frames that the new samples complete.  Every
frame is computed by :func:`asrkit.data.features.compute_fbank` from exactly the samples
the whole-utterance call would use (Kaldi's ``snip_edges`` framing: frame ``k`` covers
samples ``k·shift .. k·shift + window − 1``, and all of Kaldi's per-frame processing --
DC removal, pre-emphasis, window, power spectrum, mel, log -- reads only that frame's
samples), so the concatenation of the returned frames equals the whole-utterance
filterbank, however the audio is split (``dither`` must be 0: noise drawn per call
would differ).
"""
from __future__ import annotations

import torch

from asrkit.data.features import compute_fbank


class StreamingFbank:
    """Incremental Kaldi fbank of one stream (``[frames, num_mel_bins]`` per call).

    Samples are floats in [-1, 1) at ``sample_rate`` Hz, the training pipeline's input;
    ``frame_length`` / ``frame_shift`` in milliseconds as in ``fbank_conf``.
    """

    def __init__(self, sample_rate: int, num_mel_bins: int, frame_length: float = 25.0,
                 frame_shift: float = 10.0):
        self.sample_rate = sample_rate
        self.num_mel_bins = num_mel_bins
        self.frame_length = frame_length
        self.frame_shift = frame_shift
        self.window = int(sample_rate * frame_length * 0.001)
        self.shift = int(sample_rate * frame_shift * 0.001)
        if self.window <= 0 or self.shift <= 0:
            raise ValueError(f"frame_length {frame_length} ms / frame_shift {frame_shift} ms at "
                             f"{sample_rate} Hz give no samples")
        self.reset()

    def reset(self) -> None:
        """Forget the buffered samples (a new segment starts)."""
        self.pending = torch.zeros(0)
        self.frames_done = 0

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """Append ``samples`` (1-D) and return the frames they complete, ``[n, num_mel_bins]``
        (``n`` may be 0).  The samples no whole frame has used yet stay buffered."""
        if samples.dim() != 1:
            raise ValueError(f"samples must be 1-D, got shape {tuple(samples.shape)}")
        buffer = torch.cat([self.pending, samples.to(torch.float32)])
        if buffer.numel() < self.window:
            self.pending = buffer
            return torch.zeros(0, self.num_mel_bins)
        frames = 1 + (buffer.numel() - self.window) // self.shift
        used = (frames - 1) * self.shift + self.window
        feats = compute_fbank(buffer[:used].unsqueeze(0), self.sample_rate, num_mel_bins=self.num_mel_bins,
                              frame_length=self.frame_length, frame_shift=self.frame_shift)
        self.pending = buffer[frames * self.shift:]  # the next frame starts here
        self.frames_done += frames
        return feats
