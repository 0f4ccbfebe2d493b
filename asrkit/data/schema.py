"""Top-level config keys owned by ``asrkit.data`` (merged into ``asrkit.config.TrainConfig``).

Key names and defaults follow WeNet's ``dataset_conf``.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Optional, Union

from asrkit.data.features import LOW_FREQ, SAMPLE_SCALES
from asrkit.data.loader_schema import LoaderKeys
from asrkit.data.noise import db_range
from asrkit.schema import (WenetKey, any_value, between, checked, merged_wenet_keys, non_negative, one_of, only,
                           optional, positive)


@dataclasses.dataclass
class FilterConf:
    """``filter_conf``: drop a sample (counted skip) when its length is outside the range.
    Lengths of audio are in 10 ms frames of the audio before speed perturbation
    (``samples / sample_rate * 100``), token lengths in units; the ratio is
    ``tokens / frames``."""

    max_length: float = checked(10240.0, positive)
    min_length: float = checked(10.0, non_negative)
    token_max_length: int = checked(200, positive)
    token_min_length: int = checked(1, non_negative)
    min_output_input_ratio: float = checked(0.0005, non_negative)
    max_output_input_ratio: float = checked(1.0, positive)

    def validate(self) -> list[str]:
        errors = []
        if self.min_length > self.max_length:
            errors.append(f"min_length {self.min_length} > max_length {self.max_length}")
        if self.token_min_length > self.token_max_length:
            errors.append(f"token_min_length {self.token_min_length} > token_max_length {self.token_max_length}")
        if self.min_output_input_ratio > self.max_output_input_ratio:
            errors.append("min_output_input_ratio > max_output_input_ratio")
        return errors


@dataclasses.dataclass
class ResampleConf:
    """``resample_conf``: every input is resampled to ``resample_rate`` Hz."""

    resample_rate: int = checked(16000, positive)


def _sample_scale_ok(value) -> Optional[str]:
    if value in SAMPLE_SCALES:
        return None
    return (f"must be 32768 (samples scaled to the 16-bit range: Kaldi, WeNet, sherpa-onnx's WeNet CTC "
            f"models) or 1 (samples in [-1, 1]: sherpa-onnx's transducers), got {value!r}")


def _high_freq_ok(value) -> Optional[str]:
    return None if value == value and abs(value) != float("inf") else f"must be a finite number, got {value!r}"


@dataclasses.dataclass
class FbankConf:
    """``fbank_conf``: Kaldi filterbank; lengths in ms; ``dither`` in 16-bit units
    (training only, whatever ``sample_scale``).

    The three options below are torchaudio's/Kaldi's; their defaults are what WeNet (and
    asrkit until now) computes, so a WeNet config means what it meant.  What sherpa-onnx
    (kaldi-native-fbank) computes is ``snip_edges: false`` and ``high_freq: -400``
    (docs/export.md).

    * ``snip_edges``: true: frames lie inside the audio, ``1 + (T − window) // shift``
      of them; false: frame ``k`` is centred on ``k·shift + shift/2``, the edges
      reflected, ``round(T / shift)`` frames.
    * ``high_freq``: the top edge of the mel filters in Hz; ``<= 0`` is an offset from
      Nyquist (0: Nyquist, −400: Nyquist − 400 Hz).  The bottom edge is 20 Hz.
    * ``sample_scale``: samples in [-1, 1) are multiplied by this before the filterbank:
      32768 (the 16-bit range, Kaldi/WeNet) or 1.
    """

    num_mel_bins: int = checked(80, positive)
    frame_length: float = checked(25.0, positive)
    frame_shift: float = checked(10.0, positive)
    dither: float = checked(0.0, non_negative)
    snip_edges: bool = True
    high_freq: float = checked(0.0, _high_freq_ok)
    sample_scale: float = checked(32768.0, _sample_scale_ok)

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "window_type": only("povey", reason="asrkit's only analysis window (Kaldi's default)"),
    }


@dataclasses.dataclass
class LogMelSpectrogramConf:
    """``log_mel_spectrogram_conf`` (``feats_type: log_mel_spectrogram``; WeNet's keys and
    meanings): Whisper's log-mel (:func:`asrkit.data.whisper_features.log_mel_spectrogram`)
    of 16 kHz audio in [-1, 1] with ``padding`` zero samples appended (WeNet's converter
    writes 0: no padding to Whisper's 30 s; ``(N + padding) // hop_length`` frames).  Only
    Whisper's ``n_fft`` 400, ``hop_length`` 160 and 80 or 128 ``num_mel_bins`` (the mel
    filters the openai-whisper package ships) are accepted."""

    n_fft: int = checked(400, lambda v: None if v == 400 else f"Whisper's log-mel has n_fft 400, got {v}")
    hop_length: int = checked(160, lambda v: None if v == 160 else f"Whisper's log-mel has hop_length 160, got {v}")
    num_mel_bins: int = checked(80, lambda v: None if v in (80, 128) else
                                f"Whisper's mel filters have 80 or 128 bins, got {v}")
    padding: int = checked(0, non_negative)


@dataclasses.dataclass
class SpecAugConf:
    """``spec_aug_conf``: SpecAugment time/frequency masks (counts and maximum widths).
    ``max_t_fraction`` (asrkit's; lhotse's ``max_frames_mask_fraction``): the time masks
    together cover at most this fraction of an utterance (``asrkit.data.augment.spec_aug``);
    ``None``: WeNet's masks, ``max_t`` frames whatever the utterance's length."""

    num_t_mask: int = checked(2, non_negative)
    num_f_mask: int = checked(2, non_negative)
    max_t: int = checked(50, positive)
    max_f: int = checked(10, positive)
    max_t_fraction: Optional[float] = checked(None, optional(between(0.0, 1.0)))

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "max_w": any_value(int, "WeNet's spec_aug takes max_w and never uses it (no time warping)"),
    }


@dataclasses.dataclass
class SpecSubConf:
    """``spec_sub_conf``: number of substituted spans and their maximum length (frames)."""

    num_t_sub: int = checked(3, non_negative)
    max_t: int = checked(20, positive)


@dataclasses.dataclass
class SpecTrimConf:
    """``spec_trim_conf``: maximum number of trailing frames trimmed."""

    max_t: int = checked(20, positive)


def _speeds_ok(speeds) -> Optional[str]:
    if not speeds:
        return "needs at least one speed"
    bad = [s for s in speeds if between(0.5, 2.0)(s)]
    return f"speeds must lie in [0.5, 2.0], got {bad}" if bad else None


def _probability(value) -> Optional[str]:
    return between(0.0, 1.0)(value)


def _db_range_ok(value) -> Optional[str]:
    try:
        db_range(value)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


@dataclasses.dataclass
class ReverbConf:
    """``reverb_conf`` (ESPnet's names): ``rir_scp``, a list of room impulse responses
    (Kaldi's RIRS_NOISES ``rir_list``, a ``wav.scp`` or one path per line:
    ``asrkit.data.noise_lists``); each training utterance is convolved with one drawn from
    it with probability ``rir_apply_prob`` (``asrkit.data.reverb``)."""

    rir_scp: Optional[str] = None
    rir_apply_prob: float = checked(1.0, _probability)


@dataclasses.dataclass
class NoiseConf:
    """``noise_conf`` (ESPnet's names): ``noise_scp``, a list of noise recordings (MUSAN's
    ``wav.scp``, RIRS_NOISES' ``noise_list``, or one path per line); with probability
    ``noise_apply_prob`` one is added at an SNR uniform in ``noise_db_range`` dB --
    ``[low, high]``, one number (a fixed SNR), or ESPnet's strings ``"low_high"`` /
    ``"value"`` (``asrkit.data.noise``)."""

    noise_scp: Optional[str] = None
    noise_apply_prob: float = checked(1.0, _probability)
    noise_db_range: Union[list[float], str, float] = checked(default_factory=lambda: [5.0, 20.0], check=_db_range_ok)


def _band_rates_ok(rates) -> Optional[str]:
    if not isinstance(rates, list) or not rates or not all(isinstance(r, int) and r > 0 for r in rates):
        return f"expected a non-empty list of positive sample rates in Hz, e.g. [8000], got {rates!r}"
    return None


@dataclasses.dataclass
class BandLimitConf:
    """``band_limit_conf``: with probability ``band_limit_apply_prob`` the waveform is
    resampled down to a rate drawn from ``rates`` (those below its own) and back up, so it
    keeps no content above that rate's Nyquist frequency (``asrkit.data.bandwidth``)."""

    rates: list[int] = checked(default_factory=lambda: [8000], check=_band_rates_ok)
    band_limit_apply_prob: float = checked(0.5, _probability)


def _bits_ok(bits) -> Optional[str]:
    if not isinstance(bits, list) or not bits or not all(isinstance(b, int) and 2 <= b <= 24 for b in bits):
        return f"expected a non-empty list of sample depths in bits (2-24), e.g. [8], got {bits!r}"
    return None


@dataclasses.dataclass
class RequantizeConf:
    """``requantize_conf``: with probability ``requantize_apply_prob`` every sample is rounded
    to a ``bits``-bit PCM grid, the depth drawn from ``bits`` (``asrkit.data.quantization``)."""

    bits: list[int] = checked(default_factory=lambda: [8], check=_bits_ok)
    requantize_apply_prob: float = checked(0.5, _probability)


@dataclasses.dataclass
class VolumePerturbConf:
    """``volume_perturb_conf`` (Kaldi's ``perturb_data_dir_volume.sh`` scales): with
    probability ``volume_apply_prob`` the waveform is multiplied by a factor uniform in
    [``scale_low``, ``scale_high``] -- ``scale_distribution`` ``uniform`` (Kaldi's) or
    ``log_uniform`` (uniform in decibels: as many quiet gains as loud ones)."""

    scale_low: float = checked(0.125, positive)
    scale_high: float = checked(2.0, positive)
    volume_apply_prob: float = checked(1.0, _probability)
    scale_distribution: str = checked("uniform", one_of(lambda: ("uniform", "log_uniform")))

    def validate(self) -> list[str]:
        return [f"scale_low {self.scale_low} > scale_high {self.scale_high}"] if self.scale_low > self.scale_high else []


@dataclasses.dataclass
class LanguageConf:
    """``language_conf`` (WeNet's): ``limited_langs``, the languages WeNet's data pipeline
    classifies each transcript among (``langid``), the language of ``model: whisper``'s
    prompt; asrkit takes one (:func:`asrkit.models.schema.whisper_language`); ``None``: not
    given."""

    limited_langs: Optional[list[str]] = None


@dataclasses.dataclass
class ProcessorKeys:
    """Per-sample processing keys of ``dataset_conf`` (``asrkit.data.processors``).

    Training-time augmentation (speed perturbation, reverberation, additive noise, band
    limitation, volume perturbation, requantization, dither, SpecAugment, spec_sub, spec_trim)
    applies only to a pipeline built with ``train=True``; ``reverb``, ``noise``, ``band_limit``,
    ``volume_perturb`` and ``requantize`` switch the five waveform augmentations of
    ``asrkit.data.reverb``, ``asrkit.data.noise``, ``asrkit.data.bandwidth`` and
    ``asrkit.data.quantization`` on, in that order (docs/data.md).  ``cmvn_file``
    (asrkit addition): apply global CMVN in the data pipeline; leave it null when the
    model applies CMVN (WeNet's ``cmvn_conf``), or it is applied twice.
    """

    filter_conf: FilterConf = dataclasses.field(default_factory=FilterConf)
    resample_conf: ResampleConf = dataclasses.field(default_factory=ResampleConf)
    speed_perturb: bool = False
    speeds: list[float] = checked(default_factory=lambda: [0.9, 1.0, 1.1], check=_speeds_ok)
    feats_type: Literal["fbank", "log_mel_spectrogram"] = "fbank"
    fbank_conf: FbankConf = dataclasses.field(default_factory=FbankConf)
    log_mel_spectrogram_conf: LogMelSpectrogramConf = dataclasses.field(default_factory=LogMelSpectrogramConf)
    cmvn_file: Optional[str] = None
    reverb: bool = False
    reverb_conf: ReverbConf = dataclasses.field(default_factory=ReverbConf)
    noise: bool = False
    noise_conf: NoiseConf = dataclasses.field(default_factory=NoiseConf)
    band_limit: bool = False
    band_limit_conf: BandLimitConf = dataclasses.field(default_factory=BandLimitConf)
    volume_perturb: bool = False
    volume_perturb_conf: VolumePerturbConf = dataclasses.field(default_factory=VolumePerturbConf)
    requantize: bool = False
    requantize_conf: RequantizeConf = dataclasses.field(default_factory=RequantizeConf)
    spec_aug: bool = True
    spec_aug_conf: SpecAugConf = dataclasses.field(default_factory=SpecAugConf)
    spec_sub: bool = False
    spec_sub_conf: SpecSubConf = dataclasses.field(default_factory=SpecSubConf)
    spec_trim: bool = False
    spec_trim_conf: SpecTrimConf = dataclasses.field(default_factory=SpecTrimConf)
    language_conf: LanguageConf = dataclasses.field(default_factory=LanguageConf)

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {}

    @property
    def feat_dim(self) -> int:
        """The features' dimension: ``num_mel_bins`` of the section ``feats_type`` selects."""
        conf = self.fbank_conf if self.feats_type == "fbank" else self.log_mel_spectrogram_conf
        return conf.num_mel_bins


@dataclasses.dataclass
class DatasetConf(ProcessorKeys, LoaderKeys):
    """``dataset_conf``: processor keys plus sampler/loader keys."""

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = merged_wenet_keys(ProcessorKeys, LoaderKeys)


@dataclasses.dataclass
class DataSections:
    """Top-level keys of this package."""

    dataset_conf: DatasetConf = dataclasses.field(default_factory=DatasetConf)

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "dataset": only("asr", reason="asrkit's only dataset type (speech with transcripts)"),
    }

    def validate(self) -> list[str]:
        """``fbank_conf.high_freq`` against the sample rate: the mel filters' top edge must
        lie above their bottom edge (20 Hz) and at most at Nyquist; ``noise``/``reverb``
        need their list (its content is checked by training's preflight)."""
        dc = self.dataset_conf
        errors = []
        nyquist = dc.resample_conf.resample_rate / 2
        high = dc.fbank_conf.high_freq
        top = high if high > 0 else nyquist + high
        if not LOW_FREQ < top <= nyquist:
            errors.append(f"dataset_conf.fbank_conf.high_freq: {high:g} puts the top mel edge at {top:g} Hz; at "
                          f"{dc.resample_conf.resample_rate} Hz it must lie in ({LOW_FREQ:g}, {nyquist:g}] Hz "
                          f"(<= 0: an offset from Nyquist)")
        if dc.feats_type == "log_mel_spectrogram" and dc.resample_conf.resample_rate != 16000:
            errors.append(f"dataset_conf.feats_type: log_mel_spectrogram is Whisper's, of 16 kHz audio; "
                          f"resample_conf.resample_rate is {dc.resample_conf.resample_rate}")
        if dc.noise and not dc.noise_conf.noise_scp:
            errors.append("dataset_conf.noise: true needs noise_conf.noise_scp (a noise list: wav.scp, "
                          "RIRS_NOISES noise_list or one path per line)")
        if dc.reverb and not dc.reverb_conf.rir_scp:
            errors.append("dataset_conf.reverb: true needs reverb_conf.rir_scp (a room impulse response list: "
                          "RIRS_NOISES rir_list, wav.scp or one path per line)")
        return errors
