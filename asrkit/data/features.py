"""Features: Kaldi-compatible log mel filterbank and global CMVN statistics.

Filterbank: ``torchaudio.compliance.kaldi.fbank`` on the waveform scaled to the 16-bit
integer range (Kaldi's convention), with Kaldi's defaults (povey window, pre-emphasis
0.97, DC removal, FFT size rounded up to a power of two, power spectrum, mel bins from
20 Hz to Nyquist, natural log with a float-epsilon floor) and ``energy_floor`` 0
(WeNet).  ``frame_length``/``frame_shift`` are in milliseconds; frames are the
``snip_edges`` count ``1 + (T - window) // shift`` (no frame for audio shorter than one
window).

Dither: Gaussian noise of standard deviation ``dither`` (16-bit units) is added to the
waveform before analysis, drawn from the caller's generator, so a sample's dither is
reproducible (Kaldi adds it per frame from a global RNG: same level, not reproducible).

Global CMVN file (WeNet JSON): ``{"mean_stat": [sum of each dim over all frames],
"var_stat": [sum of squares of each dim], "frame_num": N}``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import torchaudio.compliance.kaldi as kaldi

from asrkit.io.files import atomic_write_text

INT16_SCALE = 1 << 15
VARIANCE_FLOOR = 1.0e-20


def compute_fbank(wav: torch.Tensor, sample_rate: int, *, num_mel_bins: int, frame_length: float,
                  frame_shift: float, dither: float = 0.0,
                  generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Log mel filterbank ``[frames, num_mel_bins]`` float32 of ``wav`` ``[1, T]`` (float
    samples in [-1, 1)).  ``dither > 0`` needs ``generator``.  Returns ``[0, num_mel_bins]``
    when the audio is shorter than one frame."""
    scaled = wav * INT16_SCALE
    if dither > 0.0:
        if generator is None:
            raise ValueError("dither > 0 needs a generator (reproducible per-sample noise)")
        scaled = scaled + dither * torch.randn(scaled.shape, generator=generator, dtype=scaled.dtype)
    window = int(sample_rate * frame_length * 0.001)
    if scaled.shape[-1] < window:
        return torch.zeros(0, num_mel_bins)
    return kaldi.fbank(scaled, num_mel_bins=num_mel_bins, frame_length=frame_length,
                       frame_shift=frame_shift, dither=0.0, energy_floor=0.0,
                       sample_frequency=float(sample_rate))


def num_frames(num_samples: int, sample_rate: int, frame_length: float, frame_shift: float) -> int:
    """Frames :func:`compute_fbank` gives for ``num_samples`` samples (``snip_edges``)."""
    window = int(sample_rate * frame_length * 0.001)
    shift = int(sample_rate * frame_shift * 0.001)
    return 0 if num_samples < window else 1 + (num_samples - window) // shift


class CmvnStats:
    """Accumulates per-dimension sums, sums of squares (float64) and the frame count."""

    def __init__(self, dim: int):
        self.sum = torch.zeros(dim, dtype=torch.float64)
        self.sum_sq = torch.zeros(dim, dtype=torch.float64)
        self.frames = 0

    def add(self, feat: torch.Tensor) -> None:
        """Add the frames of ``feat`` ``[frames, dim]``."""
        if feat.dim() != 2 or feat.shape[1] != self.sum.numel():
            raise ValueError(f"expected [frames, {self.sum.numel()}] features, got {list(feat.shape)}")
        f64 = feat.to(torch.float64)
        self.sum += f64.sum(0)
        self.sum_sq += (f64 * f64).sum(0)
        self.frames += feat.shape[0]

    def merge(self, other: "CmvnStats") -> None:
        self.sum += other.sum
        self.sum_sq += other.sum_sq
        self.frames += other.frames

    def to_json(self) -> dict:
        return {"mean_stat": self.sum.tolist(), "var_stat": self.sum_sq.tolist(), "frame_num": self.frames}


def write_cmvn(path: str | Path, stats: CmvnStats) -> None:
    """Write ``stats`` as a WeNet global CMVN JSON file, atomically
    (:class:`asrkit.io.files.WriteError` on failure, the old file kept)."""
    if stats.frames == 0:
        raise ValueError("no frames accumulated: refusing to write empty CMVN statistics")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(stats.to_json()))


class CmvnError(ValueError):
    """A global CMVN file is missing or malformed; the one-line message names the file."""


def load_cmvn(path: str | Path, dim: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, istd)`` float32 ``[F]`` from a WeNet global CMVN JSON file:
    ``mean = mean_stat / N``, ``var = max(var_stat / N - mean², 1e-20)``,
    ``istd = 1 / sqrt(var)``.  Raises :class:`CmvnError` when the file is missing, not
    such a JSON file, or (with ``dim``) of another dimension than the features."""
    path = Path(path)
    if not path.is_file():
        raise CmvnError(f"CMVN file not found: {path}")
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
        mean_stat = torch.tensor(stats["mean_stat"], dtype=torch.float64)
        var_stat = torch.tensor(stats["var_stat"], dtype=torch.float64)
        frames = int(stats["frame_num"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError,
            ValueError, RuntimeError) as e:
        reason = f"no {e} key" if isinstance(e, KeyError) else str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CmvnError(f"{path}: not a CMVN JSON file with mean_stat, var_stat, frame_num ({reason})") from None
    if mean_stat.dim() != 1 or mean_stat.shape != var_stat.shape or frames <= 0:
        raise CmvnError(f"{path}: mean_stat/var_stat must be equal-length lists of numbers and frame_num > 0")
    if not (torch.isfinite(mean_stat).all() and torch.isfinite(var_stat).all()):
        raise CmvnError(f"{path}: mean_stat/var_stat hold non-finite values")
    if dim is not None and mean_stat.numel() != dim:
        raise CmvnError(f"{path}: CMVN statistics of dimension {mean_stat.numel()}, the features have {dim} "
                        f"(dataset_conf.fbank_conf.num_mel_bins)")
    mean = mean_stat / frames
    var = torch.clamp(var_stat / frames - mean * mean, min=VARIANCE_FLOOR)
    return mean.float(), var.rsqrt().float()


def apply_cmvn(feat: torch.Tensor, mean: torch.Tensor, istd: torch.Tensor) -> torch.Tensor:
    """``(feat - mean) * istd``, broadcast over frames."""
    return (feat - mean) * istd
