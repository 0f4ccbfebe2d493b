"""Whisper's log-mel spectrogram (WeNet's ``feats_type: log_mel_spectrogram``), computed as
``whisper.audio.log_mel_spectrogram`` computes it, with the mel filters the
``openai-whisper`` package ships (``whisper/assets/mel_filters.npz``, found by
:func:`asrkit.whisper_assets.whisper_asset`)."""
from __future__ import annotations

import functools

import numpy as np
import torch

from asrkit.whisper_assets import whisper_asset

# Whisper's input: 16 kHz, 30 s windows of 3000 frames of 10 ms
SAMPLE_RATE = 16000
CHUNK_SAMPLES = 30 * SAMPLE_RATE
CHUNK_FRAMES = 3000


@functools.lru_cache(maxsize=None)
def mel_filters(num_mel_bins: int) -> torch.Tensor:
    """``[num_mel_bins, 201]`` float32: the package's ``mel_{80,128}`` filters (librosa's
    Slaney-normalised mel filters for n_fft 400 at 16 kHz).  ValueError (one line) for another
    bin count or without the ``openai-whisper`` package."""
    if num_mel_bins not in (80, 128):
        raise ValueError(f"Whisper's mel filters have 80 or 128 bins, got num_mel_bins {num_mel_bins}")
    path = whisper_asset("mel_filters.npz")
    if path is None:
        raise ValueError("Whisper's log-mel features need the openai-whisper package (its mel filters): "
                         "pip install -r requirements.txt")
    with np.load(path, allow_pickle=False) as f:
        return torch.from_numpy(f[f"mel_{num_mel_bins}"]).float()


def log_mel_frames(num_samples: int, n_fft: int = 400, hop_length: int = 160, padding: int = 0) -> int:
    """How many frames :func:`log_mel_spectrogram` makes of ``num_samples`` samples:
    ``(N + padding) // hop_length``, or 0 where the input is too short for the centred
    STFT's reflection (``N + padding <= n_fft // 2``: no spectrogram at all)."""
    if num_samples + padding <= n_fft // 2:
        return 0
    return (num_samples + padding) // hop_length


def log_mel_spectrogram(samples: torch.Tensor, num_mel_bins: int = 80, n_fft: int = 400,
                        hop_length: int = 160, padding: int = 0) -> torch.Tensor:
    """``[frames, num_mel_bins]`` (time first, asrkit's layout; Whisper's is the transpose)
    of ``samples [N]`` (16 kHz, float in [-1, 1], not Kaldi's 16-bit scale) after ``padding``
    zero samples are appended: ``frames = (N + padding) // hop_length`` (the centred STFT's
    last frame dropped, as Whisper does).  Per frame: a centred (reflect-padded) STFT with a
    periodic Hann window, power ``|X|²``, the mel filters, ``log10(max(·, 1e-10))``; then over
    the whole input: floored at its maximum − 8, and ``(x + 4) / 4``.  The floor depends on
    the input's loudest bin (appended zeros never raise it; the frames within 200 samples
    of the original end do change, the STFT reading the zeros).  Only Whisper's ``n_fft`` 400 and ``hop_length`` 160 are accepted (the filters
    are made for them)."""
    if (n_fft, hop_length) != (400, 160):
        raise ValueError(f"Whisper's log-mel is n_fft 400, hop_length 160; got {n_fft}, {hop_length}")
    if samples.dim() != 1:
        raise ValueError(f"log_mel_spectrogram takes one waveform [N], got shape {tuple(samples.shape)}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0 samples, got {padding}")
    audio = torch.nn.functional.pad(samples.float(), (0, padding)) if padding else samples.float()
    window = torch.hann_window(n_fft, device=audio.device)
    stft = torch.stft(audio, n_fft, hop_length, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(mel_filters(num_mel_bins).to(audio.device) @ power, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).t()


def padded_30s(samples: torch.Tensor) -> torch.Tensor:
    """``samples`` cut or zero-padded to 30 s (480000 samples): Whisper's ``pad_or_trim``,
    the input its encoder was trained on (3000 log-mel frames)."""
    if samples.size(-1) >= CHUNK_SAMPLES:
        return samples[..., :CHUNK_SAMPLES]
    return torch.nn.functional.pad(samples, (0, CHUNK_SAMPLES - samples.size(-1)))
