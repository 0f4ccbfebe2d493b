"""Filterbank features computed incrementally from audio that arrives in pieces.

:class:`StreamingFbank` holds the samples it may still need and, at each
:meth:`~StreamingFbank.accept`, returns the frames that the new samples complete;
:meth:`~StreamingFbank.finish` returns the frames only the end of the audio completes.
Every frame is computed by the functions :func:`asrkit.data.features.compute_fbank` uses
from exactly the samples the whole-utterance call reads (all of Kaldi's per-frame
processing -- DC removal, pre-emphasis, window, power spectrum, mel, log -- reads only
that frame's samples), so the concatenation of the returned frames equals the
whole-utterance filterbank, however the audio is split (``dither`` must be 0: noise drawn
per call would differ).

Framing (``snip_edges``, :mod:`asrkit.data.features`):

* true: frame ``k`` covers samples ``k·shift .. k·shift + window − 1``; it is returned as
  soon as its last sample arrives, and :meth:`finish` has nothing to add;
* false: frame ``k`` starts at ``k·shift − pad`` (``pad = window // 2 − shift // 2``) and
  samples before the start are read reflected; it is returned once its last sample
  arrives (kaldi-native-fbank's ``OnlineFbank`` rule before the input is finished), and
  :meth:`finish` returns the last frames -- those reaching past the end, read reflected
  there -- up to ``(T + shift // 2) // shift``.  The stream keeps the last ``window``
  samples (and the first ``pad`` until no frame needs them) for those reflections.
"""
from __future__ import annotations

import torch

from asrkit.data.features import INT16_SCALE, kaldi_fbank, num_frames, reflect_indices, window_and_shift


class StreamingFbank:
    """Incremental Kaldi fbank of one stream (``[frames, num_mel_bins]`` per call).

    Samples are floats in [-1, 1) at ``sample_rate`` Hz, the training pipeline's input;
    ``frame_length`` / ``frame_shift`` in milliseconds, ``snip_edges``, ``high_freq`` and
    ``sample_scale`` as in ``fbank_conf`` (:func:`asrkit.data.features.fbank_options`).
    """

    def __init__(self, sample_rate: int, num_mel_bins: int, frame_length: float = 25.0,
                 frame_shift: float = 10.0, *, snip_edges: bool = True, high_freq: float = 0.0,
                 sample_scale: float = float(INT16_SCALE)):
        self.sample_rate = sample_rate
        self.num_mel_bins = num_mel_bins
        self.frame_length = frame_length
        self.frame_shift = frame_shift
        self.snip_edges = bool(snip_edges)
        self.high_freq = float(high_freq)
        self.sample_scale = float(sample_scale)
        self.window, self.shift = window_and_shift(sample_rate, frame_length, frame_shift)
        if self.window <= 0 or self.shift <= 0:
            raise ValueError(f"frame_length {frame_length} ms / frame_shift {frame_shift} ms at "
                             f"{sample_rate} Hz give no samples")
        self.first = 0 if self.snip_edges else self.shift // 2 - self.window // 2  # frame 0's first sample
        self.reset()

    def reset(self) -> None:
        """Forget the buffered samples (a new segment starts)."""
        self.pending = torch.zeros(0)  # samples pending_start .. received − 1
        self.pending_start = 0
        self.received = 0
        self.frames_done = 0

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """Append ``samples`` (1-D) and return the frames they complete, ``[n, num_mel_bins]``
        (``n`` may be 0).  The samples a later frame may read stay buffered."""
        if samples.dim() != 1:
            raise ValueError(f"samples must be 1-D, got shape {tuple(samples.shape)}")
        self.pending = torch.cat([self.pending, samples.to(torch.float32)])
        self.received += samples.numel()
        # frames whose last sample has arrived: first + k·shift + window <= received
        reach = self.received - self.first - self.window
        ready = 0 if reach < 0 else 1 + reach // self.shift
        if not self.snip_edges:  # (never more than the whole utterance would have)
            ready = min(ready, num_frames(self.received, self.sample_rate, self.frame_length,
                                          self.frame_shift, snip_edges=False))
        return self._emit(ready, final=False)

    def finish(self) -> torch.Tensor:
        """End of input: the frames still to come (``snip_edges`` false: those reaching past
        the end, read reflected there; true: none); then the stream starts over
        (:meth:`reset`)."""
        total = num_frames(self.received, self.sample_rate, self.frame_length, self.frame_shift,
                           snip_edges=self.snip_edges)
        feats = self._emit(total, final=True)
        self.reset()
        return feats

    def _emit(self, upto: int, final: bool) -> torch.Tensor:
        """Frames ``frames_done .. upto − 1``; drops the samples no later frame reads."""
        if upto <= self.frames_done:
            return torch.zeros(0, self.num_mel_bins)
        start = self.first + self.frames_done * self.shift
        end = self.first + (upto - 1) * self.shift + self.window
        if self.snip_edges:
            wav = self.pending[start - self.pending_start:end - self.pending_start]
        else:  # (within the received samples, reflected at the start; past the end only when final)
            wav = self.pending[reflect_indices(start, end, self.received) - self.pending_start]
        feats = kaldi_fbank((wav * self.sample_scale).unsqueeze(0), self.sample_rate,
                            num_mel_bins=self.num_mel_bins, frame_length=self.frame_length,
                            frame_shift=self.frame_shift, high_freq=self.high_freq)
        self.frames_done = upto
        if not final:
            self._drop_unneeded()
        return feats

    def _drop_unneeded(self) -> None:
        """Keep the samples from the next frame's first one on -- and, centred, also the
        first ``pad`` samples while a frame still reflects them, and the last ``window``
        samples for the reflection at the end."""
        keep = self.first + self.frames_done * self.shift
        if not self.snip_edges:
            keep = 0 if keep < 0 else min(keep, self.received - self.window)
        keep = max(keep, self.pending_start)
        if keep > self.pending_start:
            self.pending = self.pending[keep - self.pending_start:]
            self.pending_start = keep
