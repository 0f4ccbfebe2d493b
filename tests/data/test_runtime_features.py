"""fbank_conf's snip_edges, high_freq and sample_scale: the defaults are WeNet's fbank (what
asrkit always computed); centred frames (snip_edges false) equal torchaudio's Kaldi fbank
with snip_edges false, with Kaldi's frame count round(T / shift); the config refuses values
no runtime computes."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import soundfile
import torch
import torchaudio.compliance.kaldi as kaldi

from asrkit.config import load_config

from asrkit.schema import ConfigError
from asrkit.data.features import FBANK_OPTION_DEFAULTS, compute_fbank, fbank_options, num_frames
from asrkit.data.schema import FbankConf

WAV = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "wavs" / "Mike-test-00002.wav"
GEOMETRY = dict(num_mel_bins=80, frame_length=25.0, frame_shift=10.0)


@pytest.fixture(scope="module")
def speech() -> tuple[torch.Tensor, int]:
    samples, rate = soundfile.read(WAV, dtype="float32")
    return torch.from_numpy(samples).unsqueeze(0), rate


def torchaudio_fbank(wav, rate, scale=32768.0, **options):
    return kaldi.fbank(wav * scale, **GEOMETRY, dither=0.0, energy_floor=0.0, sample_frequency=float(rate), **options)


def test_defaults_are_wenets_fbank(speech):
    wav, rate = speech
    assert {k: getattr(FbankConf(), k) for k in FBANK_OPTION_DEFAULTS} == FBANK_OPTION_DEFAULTS
    assert fbank_options(FbankConf()) == dict(GEOMETRY, **FBANK_OPTION_DEFAULTS)
    assert torch.equal(compute_fbank(wav, rate, **GEOMETRY), torchaudio_fbank(wav, rate))  # torchaudio's defaults


@pytest.mark.parametrize("high_freq", [0.0, -400.0, 7000.0])
def test_centred_frames_equal_torchaudio_snip_edges_false(speech, high_freq):
    wav, rate = speech
    ours = compute_fbank(wav, rate, **GEOMETRY, snip_edges=False, high_freq=high_freq)
    want = torchaudio_fbank(wav, rate, snip_edges=False, high_freq=high_freq)
    assert ours.shape == want.shape == (round(wav.size(1) / 160), 80)
    assert torch.equal(ours, want)
    for n in (400, 401, 559, 560, 1234):  # short ones: the reflection reaches both ends
        assert torch.equal(compute_fbank(wav[:, :n], rate, **GEOMETRY, snip_edges=False, high_freq=high_freq),
                           torchaudio_fbank(wav[:, :n], rate, snip_edges=False, high_freq=high_freq)), n


def test_high_freq_moves_only_the_top_mel_edge(speech):
    wav, rate = speech
    full = compute_fbank(wav, rate, **GEOMETRY)
    lower = compute_fbank(wav, rate, **GEOMETRY, high_freq=-400.0)
    assert torch.equal(compute_fbank(wav, rate, **GEOMETRY, high_freq=7600.0), lower)  # (> 0: in Hz)
    assert not torch.allclose(full, lower, atol=1e-3)


def test_frame_counts_both_ways():
    for n in (0, 79, 80, 239, 240, 399, 400, 401, 559, 560, 16000, 16079, 16080):
        centred = num_frames(n, 16000, 25.0, 10.0, snip_edges=False)
        assert centred == (n + 80) // 160 == math.floor(n / 160 + 0.5)  # Kaldi: round(T / shift)
        assert num_frames(n, 16000, 25.0, 10.0) == (0 if n < 400 else 1 + (n - 400) // 160)
        wav = torch.randn(1, n) * 0.1
        assert compute_fbank(wav, 16000, **GEOMETRY, snip_edges=False).shape == (centred, 80)
        assert compute_fbank(wav, 16000, **GEOMETRY).shape == (num_frames(n, 16000, 25.0, 10.0), 80)


def test_sample_scale_one_is_the_fbank_of_the_samples_as_read(speech):
    wav, rate = speech
    ours = compute_fbank(wav, rate, **GEOMETRY, snip_edges=False, high_freq=-400.0, sample_scale=1.0)
    assert torch.equal(ours, torchaudio_fbank(wav, rate, scale=1.0, snip_edges=False, high_freq=-400.0))
    scaled = compute_fbank(wav, rate, **GEOMETRY, snip_edges=False, high_freq=-400.0)
    unfloored = ours > math.log(torch.finfo(torch.float32).eps) + 1.0
    shift = (scaled - ours)[unfloored]  # log(32768²) wherever the epsilon floor is not reached
    assert (shift - 2 * math.log(32768)).abs().max() < 1e-3


def test_dither_stays_in_16_bit_units_at_any_sample_scale(speech):
    wav, rate = speech
    wav = wav[:, :8000]
    a = compute_fbank(wav, rate, **GEOMETRY, dither=1.0, generator=torch.Generator().manual_seed(3))
    b = compute_fbank(wav, rate, **GEOMETRY, dither=1.0, generator=torch.Generator().manual_seed(3), sample_scale=1.0)
    unfloored = b > math.log(torch.finfo(torch.float32).eps) + 1.0
    assert unfloored.float().mean() > 0.9
    assert ((a - b)[unfloored] - 2 * math.log(32768)).abs().max() < 1e-3  # the same noise, relative to the signal


def test_config_keys_and_their_refusals(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text("dataset_conf:\n  fbank_conf:\n    snip_edges: false\n    high_freq: -400\n")
    fb = load_config(config).dataset_conf.fbank_conf
    assert (fb.snip_edges, fb.high_freq, fb.sample_scale) == (False, -400.0, 32768.0)
    for override, words in (("dataset_conf.fbank_conf.sample_scale=100", "must be 32768"),
                            ("dataset_conf.fbank_conf.high_freq=9000", "must lie in (20, 8000] Hz"),
                            ("dataset_conf.fbank_conf.high_freq=-7990", "must lie in (20, 8000] Hz"),
                            ("dataset_conf.fbank_conf.snip_edges=sometimes", "expected bool")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace("]", r"\]")):
            load_config(config, [override])
    assert load_config(config, ["dataset_conf.resample_conf.resample_rate=8000",
                                "dataset_conf.fbank_conf.high_freq=3600"]).dataset_conf.fbank_conf.high_freq == 3600
