"""Features: Kaldi-compatible log mel filterbank and global CMVN statistics.

Filterbank: ``torchaudio.compliance.kaldi.fbank`` on the waveform multiplied by
``sample_scale`` (default 32768: the 16-bit integer range, Kaldi's convention), with
Kaldi's defaults (povey window, pre-emphasis 0.97, DC removal, FFT size rounded up to a
power of two, power spectrum, mel bins from 20 Hz to ``high_freq``, natural log with a
float-epsilon floor) and ``energy_floor`` 0 (WeNet).  ``frame_length``/``frame_shift``
are in milliseconds.

Framing (``snip_edges``, Kaldi's option):

* true (default, WeNet's): frame ``k`` covers samples ``k·shift .. k·shift + window − 1``;
  ``1 + (T − window) // shift`` frames (none for audio shorter than one window);
* false (kaldi-native-fbank's default, what sherpa-onnx computes): frame ``k`` is centred
  on sample ``k·shift + shift // 2`` -- it starts at ``k·shift − pad``, ``pad = window // 2
  − shift // 2`` -- and samples outside the audio are read reflected (``−1 → 0``,
  ``T → T − 1``, as Kaldi); ``(T + shift // 2) // shift`` frames.  Computed as the
  snip-edges frames of the reflected signal (:func:`reflect_indices`), which is how
  :class:`asrkit.stream.features.StreamingFbank` computes the same frames piece by piece.

``high_freq`` (Kaldi's option): the top edge of the mel filters in Hz, ``<= 0`` an offset
from Nyquist (0, the default: Nyquist; kaldi-native-fbank's default −400).

Dither: Gaussian noise of standard deviation ``dither`` in 16-bit units (``dither ·
sample_scale / 32768`` in the scaled waveform's) is added to the waveform before
analysis, drawn from the caller's generator, so a sample's dither is reproducible (Kaldi
adds it per frame from a global RNG: same level, not reproducible).

Global CMVN file (WeNet JSON): ``{"mean_stat": [sum of each dim over all frames],
"var_stat": [sum of squares of each dim], "frame_num": N}``; asrkit adds
``"asrkit_features"``, the filterbank the statistics are of (:func:`feature_record`; WeNet
ignores the key), so statistics of other features are refused instead of silently
normalising wrongly (files without the key, e.g. WeNet's, are taken as they are).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import torchaudio.compliance.kaldi as kaldi

from asrkit.files import atomic_write_text

INT16_SCALE = 1 << 15
VARIANCE_FLOOR = 1.0e-20
LOW_FREQ = 20.0                            # bottom edge of the mel filters (Kaldi's default)
SAMPLE_SCALES = (float(INT16_SCALE), 1.0)  # fbank_conf.sample_scale: 16-bit range, or as read
# The fbank_conf options beyond the geometry, with their defaults (WeNet's fbank).
FBANK_OPTION_DEFAULTS = {"snip_edges": True, "high_freq": 0.0, "sample_scale": float(INT16_SCALE)}


def fbank_options(fbank_conf) -> dict:
    """The keyword arguments of :func:`compute_fbank` (and :class:`StreamingFbank`) that
    ``fbank_conf`` (:class:`asrkit.data.schema.FbankConf`) sets, except ``dither``:
    ``num_mel_bins``, ``frame_length``, ``frame_shift``, ``snip_edges``, ``high_freq``,
    ``sample_scale``."""
    return {"num_mel_bins": int(fbank_conf.num_mel_bins), "frame_length": float(fbank_conf.frame_length),
            "frame_shift": float(fbank_conf.frame_shift), "snip_edges": bool(fbank_conf.snip_edges),
            "high_freq": float(fbank_conf.high_freq), "sample_scale": float(fbank_conf.sample_scale)}


def window_and_shift(sample_rate: int, frame_length: float, frame_shift: float) -> tuple[int, int]:
    """Samples per frame and per hop (Kaldi's truncation)."""
    return int(sample_rate * frame_length * 0.001), int(sample_rate * frame_shift * 0.001)


def reflect_indices(start: int, end: int, n: int) -> torch.Tensor:
    """Sample indices ``start .. end − 1`` of a signal of ``n`` samples, those outside it
    reflected as Kaldi reflects them (``−1 → 0``, ``−2 → 1``, ``n → n − 1``; repeatedly
    for signals shorter than the reach)."""
    i = torch.arange(start, end, dtype=torch.int64).remainder(2 * n)
    return torch.where(i >= n, 2 * n - 1 - i, i)


def kaldi_fbank(scaled: torch.Tensor, sample_rate: int, *, num_mel_bins: int, frame_length: float,
                frame_shift: float, high_freq: float = 0.0) -> torch.Tensor:
    """torchaudio's Kaldi fbank (snip-edges framing) of an already scaled, dithered and
    (for centred frames) reflected waveform ``[1, T]`` with asrkit's fixed options;
    ``[0, num_mel_bins]`` when shorter than one window."""
    window, _ = window_and_shift(sample_rate, frame_length, frame_shift)
    if scaled.shape[-1] < window:
        return torch.zeros(0, num_mel_bins)
    return kaldi.fbank(scaled, num_mel_bins=num_mel_bins, frame_length=frame_length,
                       frame_shift=frame_shift, dither=0.0, energy_floor=0.0, low_freq=LOW_FREQ,
                       high_freq=high_freq, sample_frequency=float(sample_rate))


def compute_fbank(wav: torch.Tensor, sample_rate: int, *, num_mel_bins: int, frame_length: float,
                  frame_shift: float, dither: float = 0.0, generator: Optional[torch.Generator] = None,
                  snip_edges: bool = True, high_freq: float = 0.0,
                  sample_scale: float = float(INT16_SCALE)) -> torch.Tensor:
    """Log mel filterbank ``[frames, num_mel_bins]`` float32 of ``wav`` ``[1, T]`` (float
    samples in [-1, 1)); :func:`num_frames` frames.  ``dither > 0`` needs ``generator``.
    ``snip_edges``, ``high_freq``, ``sample_scale``: see the module.  Returns
    ``[0, num_mel_bins]`` when the audio makes no frame."""
    scaled = wav * sample_scale
    if dither > 0.0:
        if generator is None:
            raise ValueError("dither > 0 needs a generator (reproducible per-sample noise)")
        level = dither if sample_scale == INT16_SCALE else dither * sample_scale / INT16_SCALE
        scaled = scaled + level * torch.randn(scaled.shape, generator=generator, dtype=scaled.dtype)
    options = dict(num_mel_bins=num_mel_bins, frame_length=frame_length, frame_shift=frame_shift,
                   high_freq=high_freq)
    if snip_edges:
        return kaldi_fbank(scaled, sample_rate, **options)
    frames = num_frames(scaled.shape[-1], sample_rate, frame_length, frame_shift, snip_edges=False)
    if frames == 0:
        return torch.zeros(0, num_mel_bins)
    window, shift = window_and_shift(sample_rate, frame_length, frame_shift)
    first = shift // 2 - window // 2  # first sample of frame 0
    reflected = scaled[..., reflect_indices(first, first + (frames - 1) * shift + window, scaled.shape[-1])]
    return kaldi_fbank(reflected, sample_rate, **options)


def num_frames(num_samples: int, sample_rate: int, frame_length: float, frame_shift: float,
               snip_edges: bool = True) -> int:
    """Frames :func:`compute_fbank` gives for ``num_samples`` samples: ``1 + (T − window)
    // shift`` (0 below one window) with ``snip_edges``, else ``(T + shift // 2) // shift``
    (Kaldi's rounding of ``T / shift``)."""
    window, shift = window_and_shift(sample_rate, frame_length, frame_shift)
    if not snip_edges:
        return (num_samples + shift // 2) // shift
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


FEATURES_KEY = "asrkit_features"


def feature_record(dataset_conf) -> dict:
    """What decides the filterbank's values (dither aside) for ``dataset_conf``: the sample
    rate after resampling and the ``fbank_conf`` options of :func:`fbank_options`; for
    ``feats_type: log_mel_spectrogram``, ``feats_type`` and ``log_mel_spectrogram_conf``'s keys."""
    if getattr(dataset_conf, "feats_type", "fbank") == "log_mel_spectrogram":
        lm = dataset_conf.log_mel_spectrogram_conf
        return {"sample_rate": int(dataset_conf.resample_conf.resample_rate), "feats_type": "log_mel_spectrogram",
                "num_mel_bins": lm.num_mel_bins, "n_fft": lm.n_fft, "hop_length": lm.hop_length,
                "padding": lm.padding}
    return {"sample_rate": int(dataset_conf.resample_conf.resample_rate), **fbank_options(dataset_conf.fbank_conf)}


def recorded_features(path: str | Path) -> Optional[dict]:
    """The :func:`feature_record` a CMVN file was computed for (None when it records none)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8")).get(FEATURES_KEY)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return record if isinstance(record, dict) else None


def features_difference(recorded: dict, wanted: dict) -> str:
    """``""`` when equal, else ``"snip_edges true here, false in the file; ..."``."""
    def shown(v):
        return ("true" if v else "false") if isinstance(v, bool) else f"{v:g}" if isinstance(v, (int, float)) else str(v)
    return "; ".join(f"{k} {shown(wanted[k])} here, {shown(recorded.get(k))} in the file"
                     for k in wanted if recorded.get(k) != wanted[k])


def write_cmvn(path: str | Path, stats: CmvnStats, features: Optional[dict] = None) -> None:
    """Write ``stats`` as a WeNet global CMVN JSON file, atomically
    (:class:`asrkit.files.WriteError` on failure, the old file kept), recording
    ``features`` (:func:`feature_record`) when given."""
    if stats.frames == 0:
        raise ValueError("no frames accumulated: refusing to write empty CMVN statistics")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({**stats.to_json(), **({FEATURES_KEY: features} if features else {})}))


class CmvnError(ValueError):
    """A global CMVN file is missing or malformed; the one-line message names the file."""


def load_cmvn(path: str | Path, dim: Optional[int] = None,
              features: Optional[dict] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, istd)`` float32 ``[F]`` from a WeNet global CMVN JSON file:
    ``mean = mean_stat / N``, ``var = max(var_stat / N - mean², 1e-20)``,
    ``istd = 1 / sqrt(var)``.  Raises :class:`CmvnError` when the file is missing, not
    such a JSON file, (with ``dim``) of another dimension than the features, or (with
    ``features``, a :func:`feature_record`) records other features than those."""
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
    recorded = recorded_features(path) if features is not None else None
    if recorded is not None and features_difference(recorded, features):
        raise CmvnError(f"{path}: CMVN statistics of other features ({features_difference(recorded, features)}): "
                        f"recompute them for this config (tools/compute_cmvn_stats.py) into another file")
    mean = mean_stat / frames
    var = torch.clamp(var_stat / frames - mean * mean, min=VARIANCE_FLOOR)
    return mean.float(), var.rsqrt().float()


def apply_cmvn(feat: torch.Tensor, mean: torch.Tensor, istd: torch.Tensor) -> torch.Tensor:
    """``(feat - mean) * istd``, broadcast over frames."""
    return (feat - mean) * istd
