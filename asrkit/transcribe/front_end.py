"""The features transcription computes from a segment's samples, as the model was trained on
them (``dataset_conf.feats_type``): Kaldi filterbanks (:class:`KaldiFbank`, what exported
archives and streams compute too) or Whisper's log-mel spectrogram (:class:`WhisperLogMel`).
Each says how many frames a number of samples makes, the shortest input that makes a number
of frames and the seconds per frame, so that the transcriber's length checks and token times
hold for either."""
from __future__ import annotations

import dataclasses

import torch

from asrkit.data.features import num_frames, window_and_shift
from asrkit.data.whisper_features import log_mel_spectrogram
from asrkit.stream.features import StreamingFbank

# fbank is computed in pieces of this many seconds (StreamingFbank: equal to the whole), so that
# a long segment never holds two copies of its frames' intermediate buffers
FBANK_PIECE_S = 30.0


@dataclasses.dataclass(frozen=True)
class KaldiFbank:
    """Kaldi fbank of ``fbank_conf`` (:func:`asrkit.data.features.compute_fbank`, no dither)."""

    sample_rate: int
    num_mel_bins: int
    frame_length: float      # ms
    frame_shift: float       # ms
    snip_edges: bool
    high_freq: float
    sample_scale: float

    def frames(self, num_samples: int) -> int:
        return num_frames(num_samples, self.sample_rate, self.frame_length, self.frame_shift,
                          snip_edges=self.snip_edges)

    def min_samples(self, frames: int) -> int:
        """The fewest samples that make ``frames`` (>= 1) frames."""
        if self.snip_edges:
            return int(self.sample_rate * ((frames - 1) * self.frame_shift + self.frame_length) / 1000)
        shift = window_and_shift(self.sample_rate, self.frame_length, self.frame_shift)[1]
        return frames * shift - shift // 2      # ((T + shift // 2) // shift frames)

    def features(self, wav: torch.Tensor) -> torch.Tensor:
        """``[frames, num_mel_bins]`` of ``wav [T]`` (floats in [-1, 1) at ``sample_rate``)."""
        fbank = StreamingFbank(self.sample_rate, **self.stream_options())
        piece = int(FBANK_PIECE_S * self.sample_rate)
        return torch.cat([fbank.accept(wav[i:i + piece]) for i in range(0, wav.numel(), piece)] + [fbank.finish()])

    def stream_options(self) -> dict:
        """The keyword arguments of :class:`asrkit.stream.features.StreamingFbank` after the
        sample rate."""
        return {"num_mel_bins": self.num_mel_bins, "frame_length": self.frame_length,
                "frame_shift": self.frame_shift, "snip_edges": self.snip_edges, "high_freq": self.high_freq,
                "sample_scale": self.sample_scale}


@dataclasses.dataclass(frozen=True)
class WhisperLogMel:
    """Whisper's log-mel of ``log_mel_spectrogram_conf`` (:func:`asrkit.data.whisper_features.log_mel_spectrogram`):
    ``(N + padding) // hop_length`` frames of a segment of ``N`` samples at 16 kHz, its
    normalisation over the whole segment (Whisper's: floored at its loudest bin − 8)."""

    num_mel_bins: int
    n_fft: int
    hop_length: int
    padding: int
    sample_rate: int = 16000

    @property
    def frame_shift(self) -> float:
        return 1000.0 * self.hop_length / self.sample_rate

    def frames(self, num_samples: int) -> int:
        if num_samples + self.padding <= self.n_fft // 2:  # (the centred STFT's reflection needs more)
            return 0
        return (num_samples + self.padding) // self.hop_length

    def min_samples(self, frames: int) -> int:
        return max(frames * self.hop_length - self.padding, self.n_fft // 2 + 1 - self.padding, 1)

    def features(self, wav: torch.Tensor) -> torch.Tensor:
        return log_mel_spectrogram(wav, self.num_mel_bins, self.n_fft, self.hop_length, self.padding)


def front_end_of(dataset_conf) -> KaldiFbank | WhisperLogMel:
    """The front end a config's ``dataset_conf`` trains with (``feats_type``)."""
    if dataset_conf.feats_type == "log_mel_spectrogram":
        lm = dataset_conf.log_mel_spectrogram_conf
        return WhisperLogMel(int(lm.num_mel_bins), int(lm.n_fft), int(lm.hop_length), int(lm.padding),
                             int(dataset_conf.resample_conf.resample_rate))
    fb = dataset_conf.fbank_conf
    return KaldiFbank(int(dataset_conf.resample_conf.resample_rate), int(fb.num_mel_bins), float(fb.frame_length),
                      float(fb.frame_shift), bool(fb.snip_edges), float(fb.high_freq), float(fb.sample_scale))
