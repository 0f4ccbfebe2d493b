"""The feature step of the per-sample chain (:mod:`asrkit.data.processors`), chosen by
``dataset_conf.feats_type``: Kaldi filterbanks (``fbank``, :mod:`asrkit.data.features`) or
Whisper's log-mel spectrogram (``log_mel_spectrogram``, :mod:`asrkit.data.whisper_features`).
Each adds ``feat: Tensor[frames, num_mel_bins]`` float32 to the sample; a sample that makes
no frame is the data fault ``too_short``."""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch

from asrkit.data import features, whisper_features
from asrkit.data.audio import DataFault

Sample = dict
Step = Callable[[Sample, Optional[torch.Generator]], Sample]


def fbank(sample: Sample, generator, *, num_mel_bins: int, frame_length: float, frame_shift: float,
          dither: float, **options) -> Sample:
    """Adds ``feat`` (see :func:`asrkit.data.features.compute_fbank`; ``options``: its
    ``snip_edges``, ``high_freq``, ``sample_scale``).  Fault ``too_short`` when the audio
    makes no frame."""
    feat = features.compute_fbank(sample["wav"], sample["sample_rate"], num_mel_bins=num_mel_bins,
                                  frame_length=frame_length, frame_shift=frame_shift,
                                  dither=dither, generator=generator, **options)
    if feat.shape[0] == 0:
        raise DataFault("too_short", f"{sample['key']}: shorter than one {frame_length:g} ms frame")
    sample["feat"] = feat
    return sample


def log_mel_spectrogram(sample: Sample, generator, *, num_mel_bins: int, n_fft: int, hop_length: int,
                        padding: int) -> Sample:
    """Adds ``feat``: Whisper's log-mel of the sample's first channel (16 kHz, [-1, 1]) with
    ``padding`` zero samples appended, ``(N + padding) // hop_length`` frames
    (:func:`asrkit.data.whisper_features.log_mel_spectrogram`, as WeNet's
    ``compute_log_mel_spectrogram``; no dither, nothing drawn).  Fault ``too_short`` when
    that is no frame, or when the audio is too short for the centred STFT's reflection
    (``N + padding <= n_fft // 2``)."""
    samples = sample["wav"][0]
    if whisper_features.log_mel_frames(samples.numel(), n_fft, hop_length, padding) == 0:
        raise DataFault("too_short", f"{sample['key']}: {samples.numel()} samples make no {n_fft}-point "
                                     f"STFT frame at hop {hop_length}")
    feat = whisper_features.log_mel_spectrogram(samples, num_mel_bins, n_fft, hop_length, padding)
    sample["feat"] = feat
    return sample


def feature_step(conf, train: bool) -> Step:
    """The feature step ``conf`` (a ``dataset_conf``) selects by ``feats_type``: :func:`fbank`
    with ``fbank_conf`` (its dither only when ``train``), or :func:`log_mel_spectrogram` with
    ``log_mel_spectrogram_conf``."""
    if conf.feats_type == "log_mel_spectrogram":
        lm = conf.log_mel_spectrogram_conf
        return functools.partial(log_mel_spectrogram, num_mel_bins=lm.num_mel_bins, n_fft=lm.n_fft,
                                 hop_length=lm.hop_length, padding=lm.padding)
    fb = conf.fbank_conf
    return functools.partial(fbank, **features.fbank_options(fb), dither=fb.dither if train else 0.0)
