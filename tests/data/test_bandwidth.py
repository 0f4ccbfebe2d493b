"""Bandwidth limitation (``asrkit.data.bandwidth``, ``dataset_conf.band_limit``): what the
band-limited audio holds, when the step leaves audio alone, its draws, and its config."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from asrkit.schema import ConfigError
from asrkit.data.bandwidth import limit_bandwidth
from asrkit.data.lists import read_list
from tests.data.audio_helpers import SR, check_waveform_step_in_the_chain, config


def band_power(wav: torch.Tensor, sr: int, low: float, high: float) -> float:
    spectrum = torch.fft.rfft(wav[0].double()).abs() ** 2
    freqs = torch.fft.rfftfreq(wav.shape[1], 1 / sr)
    return float(spectrum[(freqs >= low) & (freqs < high)].sum())


def white(seconds: float = 1.0, sr: int = SR) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(3).normal(0, 0.1, int(seconds * sr)).astype(np.float32))[None]


def test_a_limited_waveform_keeps_its_length_and_the_low_band_and_loses_the_high_band():
    wav = white()
    out = limit_bandwidth(wav, SR, torch.Generator().manual_seed(0), rates=[8000], prob=1.0)
    assert out.shape == wav.shape and out.dtype == torch.float32
    # above the 8 kHz rate's Nyquist frequency and the resampler's transition band (torchaudio's
    # Hann-windowed sinc: -20 dB at 4.5 kHz, -47 dB from 5 kHz on): gone
    assert band_power(out, SR, 5000, 8000) < 1e-4 * band_power(wav, SR, 5000, 8000)
    # well inside the narrow band: kept
    kept = band_power(out, SR, 100, 3500) / band_power(wav, SR, 100, 3500)
    assert 0.95 < kept < 1.05


def test_the_step_leaves_audio_alone_at_probability_zero_and_at_or_below_every_rate():
    wav = white()
    assert limit_bandwidth(wav, SR, torch.Generator().manual_seed(0), rates=[8000], prob=0.0) is wav
    narrow = white(sr=8000)
    assert limit_bandwidth(narrow, 8000, torch.Generator().manual_seed(0), rates=[8000], prob=1.0) is narrow


def test_the_rate_is_drawn_from_the_list():
    wav = white()
    cut = set()
    for seed in range(12):
        out = limit_bandwidth(wav, SR, torch.Generator().manual_seed(seed), rates=[8000, 11025], prob=1.0)
        # content between 5 and 5.3 kHz survives only the 11.025 kHz rate
        cut.add(band_power(out, SR, 5000, 5300) < 1e-3 * band_power(wav, SR, 5000, 5300))
    assert cut == {True, False}


def test_the_chain_limits_by_seed_epoch_and_key_and_only_in_training(tiny_units, tiny_corpus):
    check_waveform_step_in_the_chain(tiny_units, read_list(tiny_corpus.splits["dev"].data_list), "band_limit", 0.5, 2,
                                     band_limit=True, band_limit_conf={"rates": [8000], "band_limit_apply_prob": 0.5})


@pytest.mark.parametrize("conf, message", [
    ({"rates": []}, "non-empty list of positive sample rates"),
    ({"rates": [8000.5]}, "expected int"),
    ({"rates": [0]}, "non-empty list of positive sample rates"),
    ({"band_limit_apply_prob": 1.5}, "band_limit_apply_prob"),
])
def test_a_bad_band_limit_conf_is_refused_at_load(tiny_units, conf, message):
    with pytest.raises(ConfigError, match=message):
        config(tiny_units, band_limit=True, band_limit_conf=conf)
