"""Requantization (``asrkit.data.quantization``, ``dataset_conf.requantize``): the grid the
samples land on, when the step leaves audio alone, its draws, and its config."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from asrkit.schema import ConfigError
from asrkit.data.lists import read_list
from asrkit.data.quantization import requantize
from tests.data.audio_helpers import check_waveform_step_in_the_chain, config


def speech_level(n: int = 16000) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(5).normal(0, 0.05, n).astype(np.float32))[None]


def test_8_bits_put_every_sample_on_a_256_level_grid_nearest_and_unclipped():
    wav = speech_level()
    wav[0, :100] = 0.001  # quiet: under half a step of 1/128
    wav[0, 100] = 1.7     # beyond full scale (a raised gain): rounded, not clipped
    out = requantize(wav, torch.Generator().manual_seed(0), bits=[8], prob=1.0)
    assert out.shape == wav.shape and out.dtype == torch.float32
    steps = out * 128
    assert torch.equal(steps, steps.round())                      # on the grid
    assert float((out - wav).abs().max()) <= 0.5 / 128 + 1e-7     # the nearest point of it
    assert torch.all(out[0, :100] == 0) and float(out[0, 100]) == pytest.approx(218 / 128)
    assert torch.equal(requantize(wav, torch.Generator().manual_seed(0), bits=[16], prob=1.0) * 32768,
                       (wav * 32768).round())


def test_the_step_applies_with_its_probability_and_draws_the_depth_from_the_list():
    wav = speech_level()
    assert requantize(wav, torch.Generator().manual_seed(0), bits=[8], prob=0.0) is wav
    depths = set()
    for seed in range(16):
        out = requantize(wav, torch.Generator().manual_seed(seed), bits=[8, 12], prob=1.0)
        depths.add(8 if torch.equal(out * 128, (out * 128).round()) else 12)
    assert depths == {8, 12}


def test_the_chain_requantizes_by_seed_epoch_and_key_and_only_in_training(tiny_units, tiny_corpus):
    check_waveform_step_in_the_chain(tiny_units, read_list(tiny_corpus.splits["dev"].data_list), "requantize", 0.5, 3,
                                     requantize=True, requantize_conf={"bits": [8], "requantize_apply_prob": 0.5})


@pytest.mark.parametrize("conf, message", [
    ({"bits": []}, "sample depths in bits"),
    ({"bits": [1]}, "sample depths in bits"),
    ({"bits": [8.0]}, "expected int"),
    ({"requantize_apply_prob": -0.1}, "requantize_apply_prob"),
])
def test_a_bad_requantize_conf_is_refused_at_load(tiny_units, conf, message):
    with pytest.raises(ConfigError, match=message):
        config(tiny_units, requantize=True, requantize_conf=conf)
